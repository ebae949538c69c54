"""The generated code in src/schedd/v1 is exactly what scripts/gen_proto.sh makes from proto/."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_current(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        check=True,
        env=env,
        capture_output=True,
    )
    fresh = tmp_path / "schedd" / "v1"
    committed = ROOT / "src" / "schedd" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    assert names == sorted(
        p.name for p in committed.iterdir() if p.is_file() and p.suffix in {".py", ".pyi"}
    )
    stale = [n for n in names if not filecmp.cmp(fresh / n, committed / n, shallow=False)]
    assert not stale, f"stale generated code, run `make proto`: {stale}"


def test_public_faces_are_pinned() -> None:
    import schedd
    import schedd.client
    import schedd.obs
    import schedd.schedule
    import schedd.testing
    import schedd.worker

    assert sorted(schedd.__all__) == sorted(
        [
            "AlreadyExists",
            "Clock",
            "Conflict",
            "DeadlineExceeded",
            "ExecutionNotFound",
            "FailedPrecondition",
            "FencedOut",
            "InvalidArgument",
            "InvalidSchedule",
            "JobNotFound",
            "ManualClock",
            "NotFound",
            "PermissionDenied",
            "ResourceExhausted",
            "SchedError",
            "StaleToken",
            "SystemClock",
            "Unauthenticated",
            "TlsHandshakeFailed",
            "Unavailable",
            "__version__",
        ]
    )
    assert sorted(schedd.client.__all__) == sorted(
        [
            "IDEMPOTENT_METHODS",
            "UNSET",
            "AsyncClient",
            "BackfillResult",
            "Client",
            "ClientTls",
            "CreateJobResult",
            "ExecutionList",
            "State",
            "audit_to_dict",
            "build_job",
            "build_update",
            "cluster_status_to_dict",
            "decode_payload",
            "encode_payload",
            "execution_note",
            "execution_to_dict",
            "grpc_target",
            "iso_utc",
            "job_to_dict",
            "missing_nodes_to_dicts",
            "parse_time_ms",
            "queue_to_dict",
            "service_config",
            "tenant_limits_to_dict",
            "token_to_dict",
            "to_duration_ms",
            "worker_to_dict",
        ]
    )
    assert sorted(schedd.worker.__all__) == sorted(
        [
            "CheckpointTooLarge",
            "Context",
            "FencedStore",
            "PermanentError",
            "StaleWrite",
            "Worker",
            "WorkerConfig",
        ]
    )
    assert sorted(schedd.obs.__all__) == sorted(
        ["GaugeValue", "Health", "MetricsRecorder", "NoopRecorder"]
    )
    assert sorted(schedd.testing.__all__) == sorted(["Attempt", "Run", "SchedulerHarness"])
    assert {"parse_schedule", "plan_misfires", "Schedule"} <= set(schedd.schedule.__all__)
    for module in (
        schedd,
        schedd.client,
        schedd.worker,
        schedd.obs,
        schedd.schedule,
        schedd.testing,
    ):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is exported but missing"
