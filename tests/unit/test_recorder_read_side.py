"""The recorder's read side on both backends: ``gauge`` (read when the backend exports) and
``histogram`` (what a histogram counted, per bucket), and ``metrics_server`` choosing an
endpoint only for a recorder that can be scraped."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from schedd.obs import (
    MetricsRecorder,
    MetricsServer,
    NoopRecorder,
    PrometheusRecorder,
    metrics_server,
)
from schedd.obs._prometheus import LATENESS_BUCKETS


def gauges(rec: PrometheusRecorder) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(rec.exposition().decode()):
        if family.type == "gauge":
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_both_recorders_are_metrics_recorders() -> None:
    recorders: list[MetricsRecorder] = [NoopRecorder(), PrometheusRecorder(process=False)]
    for rec in recorders:
        rec.gauge("schedd_test_value", "A value", lambda: 1.0)
        assert isinstance(rec.histogram("schedd_no_such_seconds"), list)


def test_the_noop_recorder_takes_gauges_and_keeps_no_histograms() -> None:
    rec = NoopRecorder()
    calls: list[int] = []

    def read() -> float:
        calls.append(1)
        return 1.0

    rec.gauge("schedd_test_value", "A value", read, labels=())
    rec.fire_lateness(5.0)
    assert rec.histogram("schedd_fire_delay_seconds") == []
    assert calls == []  # never read: nothing exports


def test_a_gauge_is_read_at_each_export_with_or_without_labels() -> None:
    rec = PrometheusRecorder(("worker",), process=False)
    free = [3.0]
    by_queue = {("default",): 2.0, ("mail",): 0.0}
    rec.gauge("schedd_test_free", "Slots free", lambda: free[0])
    rec.gauge("schedd_test_pending", "Pending per queue", lambda: by_queue, labels=["queue"])
    got = gauges(rec)
    assert got[("schedd_test_free", ())] == 3.0
    assert got[("schedd_test_pending", (("queue", "default"),))] == 2.0
    assert got[("schedd_test_pending", (("queue", "mail"),))] == 0.0
    free[0] = 1.0
    del by_queue[("mail",)]
    got = gauges(rec)
    assert got[("schedd_test_free", ())] == 1.0
    assert ("schedd_test_pending", (("queue", "mail"),)) not in got  # gone, not 0


def test_a_gauge_that_raises_is_left_out_of_that_export_only() -> None:
    rec = PrometheusRecorder(("worker",), process=False)

    def broken() -> float:
        raise RuntimeError("not now")

    rec.gauge("schedd_test_broken", "Raises", broken)
    rec.gauge("schedd_test_fine", "Fine", lambda: 7.0)
    got = gauges(rec)
    assert ("schedd_test_broken", ()) not in got
    assert got[("schedd_test_fine", ())] == 7.0


def test_histogram_counts_per_bucket_not_cumulative() -> None:
    rec = PrometheusRecorder(("node",), process=False)
    rec.fired([3.0, 40.0, 10.0], held=2)  # 10 ms exactly: the 0.01 bucket (le inclusive)
    rec.fire_lateness(90_000.0)  # above every bound
    got = rec.histogram("schedd_fire_delay_seconds")
    assert [b for b, _ in got] == [*LATENESS_BUCKETS, math.inf]
    counts = dict(got)
    assert counts[0.005] == 1
    assert counts[0.01] == 1
    assert counts[0.05] == 1
    assert counts[math.inf] == 1
    assert sum(n for _, n in got) == 4  # the held ones were not handed out late


def test_histogram_lists_every_bucket_before_any_observation() -> None:
    rec = PrometheusRecorder(("worker",), process=False)
    got = rec.histogram("schedd_start_lateness_seconds")
    assert len(got) == len(LATENESS_BUCKETS) + 1
    assert all(n == 0 for _, n in got)


def test_histogram_sums_over_label_sets() -> None:
    rec = PrometheusRecorder(("node",), process=False)
    rec.store_request("claim", 0.002, ok=True)
    rec.store_request("settle", 0.002, ok=False)
    rec.store_request("settle", 3.0, ok=True)
    counts = dict(rec.histogram("schedd_store_request_seconds"))
    assert counts[0.0025] == 2
    assert counts[10] == 1


def test_histogram_of_another_role_or_unknown_name_is_empty() -> None:
    node_only = PrometheusRecorder(("node",), process=False)
    assert node_only.histogram("schedd_start_lateness_seconds") == []  # a worker's
    assert node_only.histogram("schedd_fires") == []  # a counter, not a histogram
    assert node_only.histogram("schedd_nothing_seconds") == []
    both = PrometheusRecorder(("node", "worker"), process=False)
    assert both.histogram("schedd_start_lateness_seconds") != []


def test_metrics_server_only_for_a_scrapable_recorder_and_an_address() -> None:
    prom = PrometheusRecorder(("worker",), process=False)
    server = metrics_server(prom, "127.0.0.1:0")
    assert isinstance(server, MetricsServer)
    assert server.recorder is prom
    assert metrics_server(prom, "") is None
    assert metrics_server(NoopRecorder(), "127.0.0.1:0") is None
