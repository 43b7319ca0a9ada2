"""Running on many devices and hosts: sharding of the client axis, multi-host setup, memory budgets and
GPU determinism."""
