"""The runs search's own table on PostgreSQL (`orchestrator.search`): filled a few seconds behind
the writes, re-reading an overlap, kept current by updates, partitioned and dropped with the runs;
and a search that is exact whatever the fill has done, served by its trigram indexes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from dashboard.filters import search
from orchestrator import partitions
from orchestrator import search as run_search
from orchestrator.ingest import accept
from orchestrator.models import ApiToken, Run

FAR = datetime(2031, 3, 10, 12, tzinfo=UTC)  # beyond the partitions the migration created


def sql(statement: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def entries() -> dict[int, tuple[str, str]]:
    """{run id: (attempted, detail)} as the search table holds them."""
    rows = sql(f"SELECT run_id, attempted, detail FROM {run_search.TABLE}")
    return {run_id: (attempted, detail) for run_id, attempted, detail in rows}


def found(text: str) -> list[int]:
    return sorted(search(Run.objects.all(), text).values_list("pk", flat=True))


def set_mark(when: datetime) -> None:
    sql(f"UPDATE {run_search.STATE} SET through = %s", [when])


def table_only() -> None:
    """Move the mark far ahead: no run is then read from the run table's newest seconds, so a
    search finds only what the search table's entries let through."""
    set_mark(FAR + timedelta(days=3650))


def enter(*runs: Run) -> None:
    """Give runs created in the future their entries (the fill reads up to the present only)."""
    sql(
        f"INSERT INTO {run_search.TABLE} SELECT id, created_at, '', '' FROM orchestrator_run"
        " WHERE id = ANY(%s)",
        [[r.pk for r in runs]],
    )


def run(detail: str = "", created_at: datetime | None = None, **attempted) -> Run:
    fields = {"created_at": created_at} if created_at else {}
    return Run.objects.create(
        agent="a", source="s", status="failed", detail=detail, attempted=attempted, **fields
    )


def test_a_run_is_found_before_the_fill_reaches_it_and_through_the_table_after(postgres):
    assert run_search.in_use()
    sql(f"TRUNCATE {run_search.TABLE}")
    set_mark(timezone.now() - timedelta(hours=1))
    target = run(detail="ReadTimeout from api.Example.com", query="zebrafish-42 genome")
    other = run(detail="refused", query="lungfish")
    assert found("example") == [target.pk]  # newer than the mark: read from the run table
    assert found("Fish-42") == [target.pk]  # there too, in the attempted call, whatever the case
    assert found("FISH") == [target.pk, other.pk]
    assert entries() == {}

    assert run_search.fill() == 2
    assert run_search.watermark() > target.created_at
    assert entries()[target.pk] == (
        '{"QUERY": "ZEBRAFISH-42 GENOME"}',
        "READTIMEOUT FROM API.EXAMPLE.COM",
    )
    table_only()
    assert found("fish-4") == [target.pk]  # a substring inside a word, in the attempted call
    assert found("FISH") == [target.pk, other.pk]
    assert found("api.example") == [target.pk]  # in the detail, whatever the case
    # The table is what serves the search now: without the entry the run is not found.
    sql(f"DELETE FROM {run_search.TABLE} WHERE run_id = %s", [target.pk])
    assert found("example") == []


def test_the_search_is_exact_whatever_the_table_holds(postgres):
    """LIKE's wildcards are literal text, and an entry never makes a run match by itself."""
    sql(f"TRUNCATE {run_search.TABLE}")
    percent = run(detail="quota at 100% of 5_000")
    plain = run(detail="quota at 1000 of 5000")
    run_search.fill()
    sql(f"UPDATE {run_search.TABLE} SET detail = 'QUOTA EVERYWHERE' WHERE run_id = %s", [plain.pk])
    table_only()
    assert found("100%") == [percent.pk]
    assert found("5_0") == [percent.pk]
    assert found("everywhere") == []  # the run's own detail does not hold it


@pytest.fixture
def committed_mark():
    """For a test whose writes commit: the mark and the entries put back as they were after."""
    before = run_search.watermark()
    yield
    sql(f"TRUNCATE {run_search.TABLE}")
    set_mark(before)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_run_committed_after_a_fill_passed_it_is_read_by_a_later_fill(
    postgres, committed_mark, settings
):
    """A report's transaction still open while beat fills, for longer than the overlap: the
    mark stops at its start, so the run, committed later, is entered by the next fill and found
    all along."""
    settings.RUN_SEARCH_OVERLAP_SECONDS = 1
    set_mark(timezone.now() - timedelta(minutes=5))
    inserted, release = threading.Event(), threading.Event()
    holder: list[Run] = []

    def slow_report() -> None:
        try:
            with transaction.atomic():
                holder.append(run(detail="slow commit"))
                inserted.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_report)
    thread.start()
    try:
        assert inserted.wait(10)
        for _ in range(2):  # beat, twice, over more than the overlap
            run_search.fill()  # cannot see the run, and must not move the mark past it
            time.sleep(1.2)
        assert run_search.watermark() <= holder[0].created_at + timedelta(seconds=1)
    finally:
        release.set()
        thread.join()
    slow = holder[0]
    assert found("slow commit") == [slow.pk]  # from the run table: newer than the mark
    assert run_search.fill() == 1
    table_only()
    assert found("slow commit") == [slow.pk]  # and now from its entry


def test_a_run_created_before_the_mark_gets_its_entry_as_it_is_inserted(postgres):
    set_mark(timezone.now())
    old = run(detail="imported yesterday", created_at=timezone.now() - timedelta(days=1))
    recent = run(detail="reported now", created_at=timezone.now() + timedelta(seconds=1))
    assert set(entries()) == {old.pk}  # the fill will never read it: written at once
    assert found("imported yesterday") == [old.pk]
    assert found("reported now") == [recent.pk]  # the fill's to write


def test_an_edit_of_the_detail_or_the_call_rewrites_the_entry(postgres):
    target = run(detail="pending", query="first")
    run_search.fill()
    table_only()
    Run.objects.filter(pk=target.pk).update(detail="ConnectTimeout after 30 s")
    assert found("connecttimeout") == [target.pk]
    assert found("pending") == []
    Run.objects.filter(pk=target.pk).update(attempted={"query": "second"})
    assert entries()[target.pk] == ('{"QUERY": "SECOND"}', "CONNECTTIMEOUT AFTER 30 S")
    before = entries()
    Run.objects.filter(pk=target.pk).update(status="succeeded")  # no text changed: no write
    assert entries() == before


def test_a_backlog_is_filled_a_slice_at_a_time_and_a_batch_never_splits(postgres):
    sql(f"TRUNCATE {run_search.TABLE}")
    set_mark(timezone.now() - timedelta(hours=2))
    start = timezone.now() - timedelta(hours=1)
    singles = [run(detail=f"single {i}", created_at=start + timedelta(minutes=i)) for i in range(5)]
    token, _ = ApiToken.issue("slices")
    batch = [{"agent": "a", "source": "s", "status": "ok", "detail": f"b{i}"} for i in range(8)]
    batch_ids = [outcome.id for outcome in accept(token.pk, batch)]
    assert len(set(Run.objects.filter(pk__in=batch_ids).values_list("created_at"))) == 1

    assert run_search.fill(limit=3) == 4  # up to the 4th run's creation (offset 3), inclusive
    assert run_search.watermark() == singles[3].created_at
    assert run_search.fill(limit=3) == 1 + 8  # the last single, then the whole batch at once
    assert set(entries()) == {r.pk for r in singles} | set(batch_ids)
    assert run_search.fill(limit=3) == 0
    assert run_search.catch_up(limit=3) == 0  # caught up: nothing more, and it returns


def test_catch_up_fills_a_backlog_of_many_slices(postgres):
    sql(f"TRUNCATE {run_search.TABLE}")
    set_mark(timezone.now() - timedelta(hours=2))
    start = timezone.now() - timedelta(hours=1)
    made = [run(created_at=start + timedelta(seconds=30 * i)) for i in range(20)]
    assert run_search.catch_up(limit=3) == 20
    assert set(entries()) == {r.pk for r in made}


def test_the_table_is_partitioned_like_the_runs_and_dropped_with_them(postgres, settings):
    first = partitions.create(FAR, FAR + timedelta(days=7))
    mirror = run_search.partition_name(first)
    bounds = sql(
        "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE c.relname = %s",
        [mirror],
    )
    assert bounds == [("FOR VALUES FROM ('2031-03-10 12:00:00+00') TO ('2031-03-17 12:00:00+00')",)]
    old = run(detail="old needle", created_at=FAR + timedelta(days=1))
    stray = run(detail="stray needle", created_at=FAR - timedelta(days=30))  # default partition
    enter(old, stray)
    placed = dict(sql(f"SELECT run_id, tableoid::regclass::text FROM {run_search.TABLE}"))
    assert placed[old.pk] == mirror and placed[stray.pk] == run_search.DEFAULT

    partitions.drop_before(FAR + timedelta(days=8))
    assert sql("SELECT to_regclass(%s)", [mirror]) == [(None,)]
    assert old.pk not in entries() and stray.pk not in entries()


def test_a_partition_created_late_takes_over_the_default_entries(postgres):
    stray = run(detail="early needle", created_at=FAR + timedelta(days=15))
    enter(stray)
    name = partitions.create(FAR + timedelta(days=14), FAR + timedelta(days=21))
    placed = dict(sql(f"SELECT run_id, tableoid::regclass::text FROM {run_search.TABLE}"))
    assert placed[stray.pk] == run_search.partition_name(name)


def test_the_run_table_has_no_trigram_index_and_the_search_reads_the_tables(postgres):
    on_runs = sql(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'orchestrator_run'"
        " AND indexdef LIKE '%gin_trgm_ops%'"
    )
    assert on_runs == []
    qs = search(Run.objects.all(), "needle").only("id").order_by()
    statement, params = qs.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {statement}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # Each partition has its own copy of the indexes (named after it): what matters is that
    # both columns are read through a trigram index.
    assert "Index Cond: (attempted ~~ '%NEEDLE%'" in plan, plan
    assert "Index Cond: (detail ~~ '%NEEDLE%'" in plan, plan


@pytest.mark.parametrize("walk_above", [-1, 10**9], ids=["walking", "from the index"])
@pytest.mark.parametrize("through", ["beginning", "now"])
def test_a_search_finds_the_same_runs_as_the_plain_scan(postgres, settings, through, walk_above):
    """The same runs as matching every run's columns, whether the fill has read nothing or all,
    walking the runs or starting from the trigram matches."""
    settings.RUN_SEARCH_WALK_ABOVE = walk_above
    texts = ["timeout", "api.", "%", "_", "Ø", '"query"', "zz-none"]
    details = ["ReadTimeout at api.x.io", "50% done", "snake_case", "ØRESUND", "", "timeout"]
    for i, detail in enumerate(details):
        run(detail=detail, query=f"query {i} {detail.lower()}")
    if through == "now":
        run_search.fill()
        table_only()
    else:
        set_mark(datetime.fromisoformat(run_search.BEGINNING))
    for text in texts:
        plain = Run.objects.filter(pk__in=[r.pk for r in Run.objects.all() if _contains(r, text)])
        assert found(text) == sorted(plain.values_list("pk", flat=True)), text


def test_a_common_text_walks_the_runs_and_a_rare_one_starts_from_the_index(postgres, settings):
    for i in range(400):
        run(detail=f"upstream said no (run {i})")
    run_search.fill()
    sql(f"ANALYZE {run_search.TABLE}")
    settings.RUN_SEARCH_WALK_ABOVE = 100
    assert run_search.estimated_matches("upstream", None, None) > 300
    assert run_search.estimated_matches("run 123)", None, None) < 100

    def reads_the_table(text: str) -> bool:
        statement, _ = search(Run.objects.all(), text).query.sql_with_params()
        return run_search.TABLE in statement

    assert not reads_the_table("upstream")  # walks: the first page is the newest runs
    assert reads_the_table("run 123)")
    assert found("run 123)") == sorted(
        Run.objects.filter(detail__contains="run 123)").values_list("pk", flat=True)
    )


def test_each_run_partition_has_statistics_on_the_searched_expressions(postgres):
    name = partitions.create(FAR, FAR + timedelta(days=7))
    kept = sql(
        "SELECT s.stxname, pg_get_statisticsobjdef_expressions(s.oid) FROM pg_statistic_ext s "
        "WHERE s.stxrelid = %s::regclass ORDER BY 1",
        [name],
    )
    assert kept == [
        (f"{name}_attempted_upper", ["upper((attempted)::text)"]),
        (f"{name}_detail_upper", ["upper(detail)"]),
    ]


def _contains(r: Run, text: str) -> bool:
    """Python's own reading of the search: the text in the detail or the call, any case."""
    import json

    haystacks = (r.detail, json.dumps(r.attempted, ensure_ascii=False))
    return any(text.upper() in haystack.upper() for haystack in haystacks)
