#!/usr/bin/env bash
# The measurements that need 16 idle cores and a GPU, in one run of about 9 minutes: the 16-core
# rows of issue 25 (vector envs on generated episodes and on trace windows, rollout workers with
# learner threads), the GPU learner (issue 25, part 5) and the 16-agent env server row (issue
# 26). Each writes its table to $OUT (default /tmp/device-round). Where hpcgym[rl] is installed:
# `bash benchmarks/device_round.sh`.
#
# For a lent machine without network, whose image has torch, numpy, msgpack, click, cloudpickle
# and tqdm but not these, prepare wheels and the trace here (the hpcgym wheel anew each time: the
# machine runs the code of the wheel, not of the checkout it is sent):
#   rm -f .whl/hpcgym-*.whl && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w .whl .
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#       pyzmq gymnasium farama-notifications
#   mkdir -p .whl/traces && cp ../shared/traces/lublin_256.swf.gz .whl/traces/
# Then, with the device tool: run(command="bash benchmarks/device_round.sh", carry=[".whl"],
# timeout_s=600). The steps' limits add up to 540 s; a step cut at its limit keeps what it printed.
set -u -o pipefail
if [ -d .whl ]; then
    ls -l .whl/hpcgym-*.whl
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
fi
if [ -d .whl/traces ]; then
    export HPCGYM_TRACES=$PWD/.whl/traces
fi
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/device-round}
mkdir -p "$out"
nproc; lscpu | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' || true  # SMT halves a core
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

step() {  # step NAME SECONDS COMMAND...: the command's output to the screen and to $out/NAME.txt
    local name=$1 limit=$2
    shift 2
    echo "== $name ($limit s): $*"
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.txt"
}

step vector2 40 taskset -c 0,1 python3 benchmarks/env_steps.py --no-ipc --rounds 15 --steps 2000
step vector8 50 python3 benchmarks/env_steps.py --no-ipc --envs 8 --rounds 5 --steps 8000
step vector8-trace 45 python3 benchmarks/env_steps.py --no-ipc --envs 8 --rounds 5 --steps 8000 \
    --trace lublin_256.swf.gz
step workers16 165 python3 benchmarks/train_scaling.py --agents ppo-select --workers 1,16 --threads 1,16 \
    --trajectories 64 --epochs 2
step gpu 155 python3 benchmarks/train_scaling.py --agents ppo-select,rlbf --workers 1,16 --devices cpu,cuda \
    --trajectories 32 --epochs 2
step server16 85 python3 benchmarks/service_latency.py --parts 3 --jobs 4000 --agents 16
