"""Helpers the tests of this folder share."""




def _timed_out_job(target, nproc, backend):
    """What perflab.distributed.torchrun.launch returns when every rank is still in its second step at the timeout."""
    from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome

    ranks = [RankOutcome(rank=r, status="timeout", step="all_reduce 262144 B", started=True, stdout="timing")
             for r in range(nproc)]
    return LaunchResult(target=target, nproc=nproc, nnodes=1, backend=BackendChoice(backend or "gloo", "cpu", "asked"),
                        commands=[["torchrun", "-m", target]], seconds=9.0, timeout_s=9.0, timed_out=True,
                        returncodes=[None], ranks=ranks)


def _one_line_error(r, needle: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr, r.stderr
