/*
 * sjf_agent: a shortest-job-first `select` agent for an hpcgym env, written in C
 * from protocol/PROTOCOL.md alone (ZeroMQ DEALER socket + msgpack-c).
 *
 * Usage: sjf_agent ADDRESS [--reset|--join] [--seed N] [--jobs N] [--sample S]
 *                          [--timeout SECONDS] [--json] [--starts FILE]
 *
 * At the episode's end it prints one short line (or, with --json, the metrics as one JSON
 * line); --starts FILE writes each job's start time to FILE, one `ID START` line per job.
 *
 * Exit status: 0 the episode completed; 1 it ended for another reason;
 * 2 the env answered `error` (or broke the protocol), or --starts could not be
 * written; 3 the env did not answer in time; 64 bad command line.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <zmq.h>

#define PROTOCOL_VERSION "1.0"
#define AGENT_NAME "c-sjf"
#define MAX_MESSAGE_BYTES (16u * 1024u * 1024u)

enum {
    EXIT_COMPLETED = 0,
    EXIT_NOT_COMPLETED = 1,
    EXIT_ENV_ERROR = 2,
    EXIT_TIMEOUT = 3,
    EXIT_USAGE = 64,
};

/* ---------------------------------------------------------------- options */

struct options {
    const char *address;
    bool reset;          /* true: --reset (default), false: --join */
    bool has_seed, has_jobs, has_sample;
    int64_t seed, jobs, sample;
    double timeout_s;
    bool json;           /* --json: the metrics as one JSON line instead of the summary */
    const char *starts;  /* --starts FILE: per-job start times (asks for records) */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sjf_agent ADDRESS [--reset|--join] [--seed N] [--jobs N] [--sample S]\n"
            "                 [--timeout SECONDS]\n"
            "  ADDRESS    the env's ZeroMQ address (tcp://HOST:PORT or ipc://PATH)\n"
            "  --reset    start the episode (default); --join: join one another agent starts\n"
            "  --seed N   episode seed sent with reset\n"
            "  --jobs N   window length (workload.jobs) sent with reset\n"
            "  --sample S random window seed (workload.sample) sent with reset\n"
            "  --timeout SECONDS  give up when a reply takes longer (default 10)\n"
            "  --json     print the episode's metrics as one JSON line (default: a short summary)\n"
            "  --starts FILE  write each job's start time to FILE, one 'ID START' line per job\n");
}

static bool parse_int(const char *text, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        return false;
    *out = (int64_t)v;
    return true;
}

static int parse_args(int argc, char **argv, struct options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->reset = true;
    opt->timeout_s = 10.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--reset") == 0) {
            opt->reset = true;
        } else if (strcmp(a, "--join") == 0) {
            opt->reset = false;
        } else if (strcmp(a, "--json") == 0) {
            opt->json = true;
        } else if (strcmp(a, "--starts") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sjf_agent: --starts needs a file name\n");
                return -1;
            }
            opt->starts = argv[++i];
        } else if (strcmp(a, "--seed") == 0 || strcmp(a, "--jobs") == 0 ||
                   strcmp(a, "--sample") == 0 || strcmp(a, "--timeout") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sjf_agent: %s needs a value\n", a);
                return -1;
            }
            const char *v = argv[++i];
            if (strcmp(a, "--timeout") == 0) {
                char *end = NULL;
                errno = 0;
                opt->timeout_s = strtod(v, &end);
                if (errno != 0 || end == v || *end != '\0' || !(opt->timeout_s > 0) ||
                    opt->timeout_s > 86400.0) {
                    fprintf(stderr, "sjf_agent: --timeout wants seconds > 0, got '%s'\n", v);
                    return -1;
                }
                continue;
            }
            int64_t n;
            if (!parse_int(v, &n)) {
                fprintf(stderr, "sjf_agent: %s wants an integer, got '%s'\n", a, v);
                return -1;
            }
            if (strcmp(a, "--seed") == 0) {
                opt->seed = n;
                opt->has_seed = true;
            } else if (strcmp(a, "--jobs") == 0) {
                if (n < 1) {
                    fprintf(stderr, "sjf_agent: --jobs wants an integer >= 1\n");
                    return -1;
                }
                opt->jobs = n;
                opt->has_jobs = true;
            } else {
                opt->sample = n;
                opt->has_sample = true;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "sjf_agent: unknown option %s\n", a);
            return -1;
        } else if (opt->address == NULL) {
            opt->address = a;
        } else {
            fprintf(stderr, "sjf_agent: more than one ADDRESS given (%s)\n", a);
            return -1;
        }
    }
    if (opt->address == NULL) {
        fprintf(stderr, "sjf_agent: ADDRESS is required\n");
        return -1;
    }
    if (!opt->reset && (opt->has_seed || opt->has_jobs || opt->has_sample))
        fprintf(stderr, "sjf_agent: note: --seed/--jobs/--sample only apply with --reset\n");
    return 0;
}

/* ------------------------------------------------------------ msgpack helpers */

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static bool obj_is_str(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* The value under string key `key` in map `map`, or NULL (not a map, or key absent). */
static const msgpack_object *map_get(const msgpack_object *map, const char *key)
{
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (obj_is_str(&kv->key, key))
            return &kv->val;
    }
    return NULL;
}

static bool obj_is_number(const msgpack_object *o)
{
    return o != NULL && (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                         o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
                         o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64);
}

/* Integers stay exact; the protocol's times and ids are integers, a float is tolerated. */
static bool obj_int(const msgpack_object *o, int64_t *out)
{
    if (o == NULL)
        return false;
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)o->via.u64;
        return true;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = o->via.i64;
        return true;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64) || o->via.f64 != floor(o->via.f64))
            return false;
        *out = (int64_t)o->via.f64;
        return true;
    default:
        return false;
    }
}

static double obj_num(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return (double)o->via.u64;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return (double)o->via.i64;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return o->via.f64;
    default:
        return NAN;
    }
}

/* Compare two numeric msgpack values without losing integer precision. */
static int num_cmp(const msgpack_object *a, const msgpack_object *b)
{
    int64_t ia, ib;
    if (obj_int(a, &ia) && obj_int(b, &ib))
        return (ia > ib) - (ia < ib);
    double da = obj_num(a), db = obj_num(b);
    return (da > db) - (da < db);
}

static const char *str_or(const msgpack_object *o, const char *fallback, int *len)
{
    if (o != NULL && o->type == MSGPACK_OBJECT_STR) {
        *len = (int)o->via.str.size;
        return o->via.str.ptr;
    }
    *len = (int)strlen(fallback);
    return fallback;
}

/* ------------------------------------------------------------ JSON output */

static void json_string(FILE *out, const char *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
}

static void json_double(FILE *out, double d)
{
    if (isnan(d))
        fputs("NaN", out);
    else if (isinf(d))
        fputs(d > 0 ? "Infinity" : "-Infinity", out);
    else {
        /* The shortest of %.15g..%.17g that reads back as the same double (%.17g always
         * does); keep a decimal point so it reads back as a float. */
        char buf[64];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        fputs(buf, out);
        if (strpbrk(buf, ".eE") == NULL)
            fputs(".0", out);
    }
}

/* Writes any msgpack value as JSON (NaN/Infinity as Python's json module writes them). */
static void json_value(FILE *out, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", out); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", out); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(out, "%" PRIu64, o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(out, "%" PRId64, o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: json_double(out, o->via.f64); break;
    case MSGPACK_OBJECT_STR: json_string(out, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', out);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                fputs(", ", out);
            json_value(out, &o->via.array.ptr[i]);
        }
        fputc(']', out);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', out);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (i)
                fputs(", ", out);
            if (kv->key.type == MSGPACK_OBJECT_STR)
                json_value(out, &kv->key);
            else
                fputs("\"?\"", out); /* the protocol's keys are strings; JSON's must be */
            fputs(": ", out);
            json_value(out, &kv->val);
        }
        fputc('}', out);
        break;
    default: fputs("null", out); break; /* bin/ext: not used by the protocol */
    }
}

/* ------------------------------------------------------------ transport */

struct conn {
    void *ctx;
    void *sock;
    const char *address;
    double timeout_s;
    zmq_msg_t body;       /* the last reply's body frame, kept alive while it is parsed */
    msgpack_unpacked reply;
};

static void fail_timeout(const struct conn *c)
{
    fprintf(stderr, "env at %s did not answer within %g s\n", c->address, c->timeout_s);
}

/* Sends ["", BODY] (the DEALER envelope). Returns 0, or an exit status. */
static int send_body(struct conn *c, const msgpack_sbuffer *sb)
{
    if (zmq_send(c->sock, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(c->sock, sb->data, sb->size, 0) < 0) {
        if (errno == EAGAIN) {
            fail_timeout(c);
            return EXIT_TIMEOUT;
        }
        fprintf(stderr, "sjf_agent: send failed: %s\n", zmq_strerror(errno));
        return EXIT_ENV_ERROR;
    }
    return 0;
}

/* Waits (bounded) for one reply and decodes it into c->reply. Returns 0, or an exit status. */
static int recv_reply(struct conn *c)
{
    long timeout_ms = (long)ceil(c->timeout_s * 1000.0);
    zmq_pollitem_t item = {.socket = c->sock, .fd = 0, .events = ZMQ_POLLIN, .revents = 0};
    int rc;
    do {
        rc = zmq_poll(&item, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        fprintf(stderr, "sjf_agent: zmq_poll failed: %s\n", zmq_strerror(errno));
        return EXIT_ENV_ERROR;
    }
    if (rc == 0 || !(item.revents & ZMQ_POLLIN)) {
        fail_timeout(c);
        return EXIT_TIMEOUT;
    }

    /* Read every frame of the multipart message; the body is the last one. A DEALER gets
     * ["", BODY]; a single-frame [BODY] is accepted too. */
    int frames = 0;
    bool delimiter_ok = true;
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, c->sock, 0) < 0) {
            fprintf(stderr, "sjf_agent: receive failed: %s\n", zmq_strerror(errno));
            zmq_msg_close(&frame);
            return EXIT_ENV_ERROR;
        }
        frames++;
        int more = zmq_msg_more(&frame);
        if (more) {
            if (zmq_msg_size(&frame) != 0)
                delimiter_ok = false;
            zmq_msg_close(&frame);
            continue;
        }
        /* Keep the body alive: msgpack-c's unpacked strings point into it. */
        zmq_msg_move(&c->body, &frame);
        zmq_msg_close(&frame);
        break;
    }
    if (frames > 2 || !delimiter_ok) {
        fprintf(stderr, "sjf_agent: unexpected reply envelope (%d frames)\n", frames);
        return EXIT_ENV_ERROR;
    }

    const char *data = (const char *)zmq_msg_data(&c->body);
    size_t size = zmq_msg_size(&c->body);
    if (size > MAX_MESSAGE_BYTES) {
        fprintf(stderr, "sjf_agent: reply of %zu bytes exceeds the protocol limit\n", size);
        return EXIT_ENV_ERROR;
    }
    size_t off = 0;
    msgpack_unpacked_destroy(&c->reply);
    msgpack_unpacked_init(&c->reply);
    msgpack_unpack_return ur = msgpack_unpack_next(&c->reply, data, size, &off);
    if (ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES) {
        fprintf(stderr, "sjf_agent: reply is not valid msgpack (%d)\n", (int)ur);
        return EXIT_ENV_ERROR;
    }
    if (off != size) {
        fprintf(stderr, "sjf_agent: reply has %zu trailing bytes\n", size - off);
        return EXIT_ENV_ERROR;
    }
    if (c->reply.data.type != MSGPACK_OBJECT_MAP ||
        map_get(&c->reply.data, "type") == NULL ||
        map_get(&c->reply.data, "type")->type != MSGPACK_OBJECT_STR) {
        fprintf(stderr, "sjf_agent: reply is not a map with a string 'type'\n");
        return EXIT_ENV_ERROR;
    }
    return 0;
}

/* One request, one reply. */
static int request(struct conn *c, const msgpack_sbuffer *sb)
{
    int rc = send_body(c, sb);
    return rc ? rc : recv_reply(c);
}

/* A request with only a `type` field (join, poll, bye). */
static int request_simple(struct conn *c, const char *type)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    pack_str(&pk, "type");
    pack_str(&pk, type);
    int rc = request(c, &sb);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ------------------------------------------------------------ the policy */

/* SJF over the observation's queue: the smallest `requested`, ties to the smaller `submit`,
 * then the smaller `id`. Returns false when the queue is empty or malformed. */
static bool sjf_pick(const msgpack_object *decision, int64_t *job)
{
    const msgpack_object *obs = map_get(decision, "observation");
    const msgpack_object *queue = map_get(obs, "queue");
    const msgpack_object *ids = map_get(queue, "id");
    const msgpack_object *req = map_get(queue, "requested");
    const msgpack_object *sub = map_get(queue, "submit");
    if (ids == NULL || req == NULL || sub == NULL || ids->type != MSGPACK_OBJECT_ARRAY ||
        req->type != MSGPACK_OBJECT_ARRAY || sub->type != MSGPACK_OBJECT_ARRAY ||
        req->via.array.size != ids->via.array.size || sub->via.array.size != ids->via.array.size)
        return false;

    /* Candidates (when given) are the ids an action may name; never pick outside them. */
    const msgpack_object *cands = map_get(decision, "candidates");
    bool check_cands = cands != NULL && cands->type == MSGPACK_OBJECT_ARRAY;

    int best = -1;
    int64_t best_id = 0;
    for (uint32_t k = 0; k < ids->via.array.size; k++) {
        const msgpack_object *id = &ids->via.array.ptr[k];
        const msgpack_object *r = &req->via.array.ptr[k];
        const msgpack_object *s = &sub->via.array.ptr[k];
        int64_t idv;
        if (!obj_int(id, &idv) || !obj_is_number(r) || !obj_is_number(s))
            continue;
        if (check_cands) {
            bool found = false;
            for (uint32_t j = 0; j < cands->via.array.size && !found; j++) {
                int64_t cv;
                found = obj_int(&cands->via.array.ptr[j], &cv) && cv == idv;
            }
            if (!found)
                continue;
        }
        if (best >= 0) {
            int c = num_cmp(r, &req->via.array.ptr[best]);
            if (c == 0)
                c = num_cmp(s, &sub->via.array.ptr[best]);
            if (c == 0)
                c = (idv > best_id) - (idv < best_id);
            if (c >= 0)
                continue;
        }
        best = (int)k;
        best_id = idv;
    }
    if (best < 0)
        return false;
    *job = best_id;
    return true;
}

/* Builds the act for a decision. Returns 0, or an exit status. */
static int answer_decision(struct conn *c, const msgpack_object *decision)
{
    const msgpack_object *id = map_get(decision, "decision");
    const msgpack_object *kind = map_get(decision, "kind");
    if (id == NULL || (id->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
                       id->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)) {
        fprintf(stderr, "sjf_agent: decision without an integer 'decision' id\n");
        return EXIT_ENV_ERROR;
    }
    if (!obj_is_str(kind, "select")) {
        int n;
        const char *k = str_or(kind, "(none)", &n);
        fprintf(stderr, "sjf_agent: asked for a '%.*s' decision, but only took 'select'\n", n, k);
        return EXIT_ENV_ERROR;
    }

    int64_t job = 0;
    bool picked = sjf_pick(decision, &job);
    if (!picked) {
        const msgpack_object *can_wait = map_get(decision, "can_wait");
        if (!(can_wait != NULL && can_wait->type == MSGPACK_OBJECT_BOOLEAN && can_wait->via.boolean)) {
            fprintf(stderr, "sjf_agent: select decision with no job to pick and waiting not allowed\n");
            return EXIT_ENV_ERROR;
        }
    }

    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pack_str(&pk, "type");
    pack_str(&pk, "act");
    pack_str(&pk, "decision");
    msgpack_pack_object(&pk, *id); /* echo it exactly */
    pack_str(&pk, "action");
    if (picked)
        msgpack_pack_int64(&pk, job);
    else
        msgpack_pack_nil(&pk);
    int rc = request(c, &sb);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ------------------------------------------------------------ episode end */

/* The metric `key` as a double, NAN when absent. */
static double metric(const msgpack_object *metrics, const char *key)
{
    const msgpack_object *v = map_get(metrics, key);
    return obj_is_number(v) ? obj_num(v) : NAN;
}

/* One short line on stdout (or the metrics as JSON); the per-job starts go to a file. Returns
 * false when the starts file cannot be written. */
static bool report_episode_end(const msgpack_object *end, const struct options *opt)
{
    const msgpack_object *metrics = map_get(end, "metrics");
    if (opt->json) {
        if (metrics != NULL && metrics->type == MSGPACK_OBJECT_MAP)
            json_value(stdout, metrics);
        else
            fputs("{}", stdout);
        fputc('\n', stdout);
    } else {
        int64_t episode = 0;
        int rn;
        const char *reason = str_or(map_get(end, "reason"), "(no reason)", &rn);
        obj_int(map_get(end, "episode"), &episode);
        printf("episode %" PRId64 ": %.*s", episode, rn, reason);
        double jobs = metric(metrics, "jobs"), bsld = metric(metrics, "mean_bsld");
        double wait = metric(metrics, "mean_wait"), util = metric(metrics, "utilization");
        if (!isnan(jobs))
            printf(", %.0f jobs", jobs);
        if (!isnan(bsld))
            printf(", mean bounded slowdown %.2f", bsld);
        if (!isnan(wait))
            printf(", mean wait %.1f s", wait);
        if (!isnan(util))
            printf(", utilization %.4f", util);
        fputc('\n', stdout);
    }
    fflush(stdout);
    if (opt->starts == NULL)
        return true;

    const msgpack_object *jobs = map_get(end, "jobs");
    const msgpack_object *ids = map_get(jobs, "job_id");
    const msgpack_object *starts = map_get(jobs, "start");
    if (ids == NULL || starts == NULL || ids->type != MSGPACK_OBJECT_ARRAY ||
        starts->type != MSGPACK_OBJECT_ARRAY || ids->via.array.size != starts->via.array.size) {
        fprintf(stderr, "sjf_agent: the episode end carries no per-job records for --starts %s%s\n",
                opt->starts, opt->reset ? "" : " (with --join, the resetting agent asks for them)");
        return false;
    }
    FILE *f = fopen(opt->starts, "w");
    if (f == NULL) {
        fprintf(stderr, "sjf_agent: cannot write %s: %s\n", opt->starts, strerror(errno));
        return false;
    }
    for (uint32_t k = 0; k < ids->via.array.size; k++) {
        json_value(f, &ids->via.array.ptr[k]);
        fputc(' ', f);
        json_value(f, &starts->via.array.ptr[k]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "sjf_agent: cannot write %s: %s\n", opt->starts, strerror(errno));
        return false;
    }
    return true;
}

static int print_error(const msgpack_object *err)
{
    int cn, mn;
    const char *code = str_or(map_get(err, "code"), "(no code)", &cn);
    const char *msg = str_or(map_get(err, "message"), "(no message)", &mn);
    fprintf(stderr, "env error %.*s: %.*s\n", cn, code, mn, msg);
    return EXIT_ENV_ERROR;
}

/* Leaves the session so our kind is freed at once (the env would otherwise hold it until we
 * time out). Best effort: the exit status never depends on it. */
static void say_bye(struct conn *c)
{
    if (request_simple(c, "bye") == 0 && !obj_is_str(map_get(&c->reply.data, "type"), "bye"))
        fprintf(stderr, "sjf_agent: note: unexpected reply to bye\n");
}

/* ------------------------------------------------------------ main */

static int run(struct conn *c, const struct options *opt)
{
    int rc;

    /* hello */
    {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 4);
        pack_str(&pk, "type");
        pack_str(&pk, "hello");
        pack_str(&pk, "protocol");
        pack_str(&pk, PROTOCOL_VERSION);
        pack_str(&pk, "agent");
        pack_str(&pk, AGENT_NAME);
        pack_str(&pk, "kinds");
        msgpack_pack_array(&pk, 1);
        pack_str(&pk, "select");
        rc = request(c, &sb);
        msgpack_sbuffer_destroy(&sb);
        if (rc)
            return rc;
        const msgpack_object *type = map_get(&c->reply.data, "type");
        if (obj_is_str(type, "error"))
            return print_error(&c->reply.data);
        if (!obj_is_str(type, "welcome")) {
            fprintf(stderr, "sjf_agent: expected 'welcome' after hello\n");
            return EXIT_ENV_ERROR;
        }
    }

    /* reset or join */
    if (opt->reset) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        bool has_workload = opt->has_jobs || opt->has_sample;
        bool records = opt->starts != NULL; /* per-job records only when they are written out */
        msgpack_pack_map(&pk, 1 + (records ? 1 : 0) + (opt->has_seed ? 1 : 0) + (has_workload ? 1 : 0));
        pack_str(&pk, "type");
        pack_str(&pk, "reset");
        if (records) {
            pack_str(&pk, "records");
            msgpack_pack_true(&pk);
        }
        if (opt->has_seed) {
            pack_str(&pk, "seed");
            msgpack_pack_int64(&pk, opt->seed);
        }
        if (has_workload) {
            pack_str(&pk, "workload");
            msgpack_pack_map(&pk, (opt->has_jobs ? 1 : 0) + (opt->has_sample ? 1 : 0));
            if (opt->has_jobs) {
                pack_str(&pk, "jobs");
                msgpack_pack_int64(&pk, opt->jobs);
            }
            if (opt->has_sample) {
                pack_str(&pk, "sample");
                msgpack_pack_int64(&pk, opt->sample);
            }
        }
        rc = request(c, &sb);
        msgpack_sbuffer_destroy(&sb);
    } else {
        rc = request_simple(c, "join");
    }
    if (rc)
        return rc;

    /* the decision loop: every reply leads to exactly one next request, or the end */
    for (;;) {
        const msgpack_object *reply = &c->reply.data;
        const msgpack_object *type = map_get(reply, "type");
        if (obj_is_str(type, "decision")) {
            rc = answer_decision(c, reply);
        } else if (obj_is_str(type, "pending")) {
            rc = request_simple(c, "poll");
        } else if (obj_is_str(type, "episode_end")) {
            bool written = report_episode_end(reply, opt);
            int rn;
            const char *reason = str_or(map_get(reply, "reason"), "(no reason)", &rn);
            bool completed = obj_is_str(map_get(reply, "reason"), "completed");
            if (!completed)
                fprintf(stderr, "episode ended: %.*s\n", rn, reason);
            say_bye(c);
            return !completed ? EXIT_NOT_COMPLETED : written ? EXIT_COMPLETED : EXIT_ENV_ERROR;
        } else if (obj_is_str(type, "error")) {
            rc = print_error(reply);
            say_bye(c);
            return rc;
        } else {
            int tn;
            const char *t = str_or(type, "?", &tn);
            fprintf(stderr, "sjf_agent: unexpected reply type '%.*s'\n", tn, t);
            return EXIT_ENV_ERROR;
        }
        if (rc)
            return rc;
    }
}

int main(int argc, char **argv)
{
    struct options opt;
    if (parse_args(argc, argv, &opt) != 0) {
        usage(stderr);
        return EXIT_USAGE;
    }

    struct conn c;
    memset(&c, 0, sizeof c);
    c.address = opt.address;
    c.timeout_s = opt.timeout_s;
    msgpack_unpacked_init(&c.reply);
    zmq_msg_init(&c.body);
    c.ctx = zmq_ctx_new();
    c.sock = c.ctx ? zmq_socket(c.ctx, ZMQ_DEALER) : NULL;
    if (c.sock == NULL) {
        fprintf(stderr, "sjf_agent: cannot create a ZeroMQ socket: %s\n", zmq_strerror(errno));
        return EXIT_ENV_ERROR;
    }
    int linger = 0;
    int sndtimeo = (int)ceil(opt.timeout_s * 1000.0);
    int64_t maxmsg = (int64_t)MAX_MESSAGE_BYTES;
    zmq_setsockopt(c.sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(c.sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
    zmq_setsockopt(c.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);

    int rc;
    if (zmq_connect(c.sock, opt.address) != 0) {
        fprintf(stderr, "sjf_agent: cannot connect to %s: %s\n", opt.address, zmq_strerror(errno));
        rc = EXIT_USAGE;
    } else {
        rc = run(&c, &opt);
    }

    msgpack_unpacked_destroy(&c.reply);
    zmq_msg_close(&c.body);
    zmq_close(c.sock);
    zmq_ctx_term(c.ctx);
    return rc;
}
