"""Programs that run inside each rank of a `torchrun` job (see `perflab.distributed.torchrun.launch`).

Every worker is a module with a `main()` that `torchrun -m perflab.distributed.workers.<name>` runs on each
rank. They use `perflab.distributed.workers.runtime` to join the process group, to say which step they are in
(so a hung rank can be located), and to hand a JSON result back to the launcher.
"""
