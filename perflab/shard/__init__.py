"""Sharding measured on torch.distributed: FSDP2 (ZeRO-3), DTensor tensor parallelism, pipelining.

* `formulas`: what each strategy should cost, per rank (memory from lesson 03's ZeRO-3 estimate,
  collective calls and bytes, the pipeline bubble (p−1)/(m+p−1)); no torch needed.
* `run.shard(strategy, nproc, ...)`: launches `perflab.shard.worker` on nproc ranks with
  `perflab.dist.torchrun.launch` (loopback, free rendezvous, timeout, every process stopped) and
  returns one row per rank with the prediction beside each measurement.
* `netns`: two "nodes" on one machine, each its own network namespace, joined by
  `torchrun --nnodes 2 --rdzv-backend c10d`.
* `lab12`: the checks of labs/12_sharding.ipynb.
"""
