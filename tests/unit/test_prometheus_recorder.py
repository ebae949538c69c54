"""PrometheusRecorder: what each event becomes in the exposition, roles, bounded labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from schedd.obs._prometheus import PrometheusRecorder, missed_category
from schedd.v1 import worker_pb2


def samples(rec: PrometheusRecorder) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(rec.exposition().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_histograms_are_cumulative_with_sum_and_count() -> None:
    rec = PrometheusRecorder(("worker",), process=False)
    for ms in (0.5, 3, 3, 40, 70_000):
        rec.execution_started(ms)
    got = samples(rec)
    bucket = "schedd_start_lateness_seconds_bucket"
    assert got[(bucket, (("le", "0.001"),))] == 1
    assert got[(bucket, (("le", "0.005"),))] == 3
    assert got[(bucket, (("le", "0.05"),))] == 4
    assert got[(bucket, (("le", "60.0"),))] == 4
    assert got[(bucket, (("le", "+Inf"),))] == 5
    assert got[("schedd_start_lateness_seconds_count", ())] == 5
    assert abs(got[("schedd_start_lateness_seconds_sum", ())] - 70.0465) < 1e-9


def test_a_value_on_a_bound_counts_in_that_bucket() -> None:
    rec = PrometheusRecorder(("node",), process=False)
    rec.fired([10.0], held=3)  # 10 ms exactly: le="0.01"
    got = samples(rec)
    assert got[("schedd_fire_delay_seconds_bucket", (("le", "0.005"),))] == 0
    assert got[("schedd_fire_delay_seconds_bucket", (("le", "0.01"),))] == 1
    assert got[("schedd_fires_total", ())] == 4


def test_outcomes_reasons_and_methods_are_bounded_labels() -> None:
    rec = PrometheusRecorder(("node", "worker"), process=False)
    rec.execution_finished(worker_pb2.OUTCOME_SUCCEEDED, 0.2)
    rec.execution_finished(worker_pb2.OUTCOME_FAILED_PERMANENT, 0.0)
    rec.missed("misfire policy skip: 3 fires while the cluster was down")
    rec.missed("starting deadline of 30s passed")
    rec.missed("something new")
    rec.grpc_request("GetJob", "NOT_FOUND", 0.002)
    rec.store_request("txn", 0.003, False)
    got = samples(rec)
    assert got[("schedd_executions_finished_total", (("outcome", "SUCCEEDED"),))] == 1
    assert got[("schedd_executions_finished_total", (("outcome", "FAILED_PERMANENT"),))] == 1
    assert got[("schedd_handler_duration_seconds_count", ())] == 1  # 0 s: decided before start
    assert got[("schedd_missed_fires_total", (("reason", "skip"),))] == 1
    assert got[("schedd_missed_fires_total", (("reason", "deadline"),))] == 1
    assert got[("schedd_missed_fires_total", (("reason", "other"),))] == 1
    assert got[("schedd_grpc_requests_total", (("code", "NOT_FOUND"), ("method", "GetJob")))] == 1
    assert got[("schedd_store_errors_total", (("op", "txn"),))] == 1
    assert missed_category("coalesced into one") == "coalesce"


def test_a_role_exposes_its_own_metrics_only() -> None:
    node = PrometheusRecorder(("node",), process=False)
    node.execution_started(5)  # a worker event on a node's recorder: ignored
    node.partitions_owned(6)
    text = node.exposition().decode()
    assert "schedd_start_lateness" not in text
    assert "schedd_partitions_owned 6.0" in text
    assert 'schedd_build_info{role="node",version=' in text
    worker = PrometheusRecorder(("worker",), process=False)
    worker.fired([1.0])
    assert "schedd_fires_total" not in worker.exposition().decode()


def test_scrape_gauges_are_read_at_scrape_time_and_a_failing_one_is_left_out() -> None:
    rec = PrometheusRecorder(("node",), process=False)
    box = {"n": 1.0}
    rec.gauge("schedd_timers", "t", lambda: box["n"])
    rec.gauge("schedd_dispatch_pending", "p", lambda: {("default",): 2.0}, ["queue"])
    rec.gauge("schedd_broken", "b", lambda: 1 / 0)
    box["n"] = 7.0
    text = rec.exposition().decode()
    assert "schedd_timers 7.0" in text
    assert 'schedd_dispatch_pending{queue="default"} 2.0' in text
    assert "schedd_broken" not in text
