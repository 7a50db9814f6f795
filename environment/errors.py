"""Typed errors: each names the problem and what to do, so the CLI can print one clear line."""


class HpcgymError(Exception):
    """Base of every error the user can cause and fix (bad file, option or action)."""


class WorkloadError(HpcgymError):
    """A trace or workload specification cannot be read or is inconsistent."""


class ConfigError(HpcgymError):
    """A simulation or command-line option is invalid."""


class InvalidAction(HpcgymError):
    """An action does not fit the pending decision; the simulation state is left unchanged."""
