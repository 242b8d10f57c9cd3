#!/usr/bin/env python3
"""Runs roce-analyze's report queries on another engine: DuckDB or Apache Spark (local mode).

    run_queries.py duckdb|spark TREE QUERIES_DIR OUT.json

QUERIES_DIR is what `roce-analyze report --emit-sql QUERIES_DIR` wrote: `engine.<name>.sql`
(the views) and one `*.sql` file per query. The tables flows, interfaces, alerts, qps and nic
are registered over TREE's Parquet files (Hive partitions), the engine's views are created, and
every query's rows are written to OUT.json as {file: [row, ...]} with integers as integers.
"""
import json
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

TABLES = ("flows", "interfaces", "alerts", "qps", "nic")


def statements(text):
    body = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def plain(v):
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def queries(qdir):
    return sorted(p for p in Path(qdir).glob("*.sql") if not p.name.startswith("engine."))


def duckdb_rows(tree, qdir):
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET TimeZone = 'UTC'")
    for t in TABLES:
        files = f"{tree}/{t}/**/*.parquet"
        con.execute(
            f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{files}', "
            "hive_partitioning = true, union_by_name = true)"
        )
    for s in statements((Path(qdir) / "engine.duckdb.sql").read_text()):
        con.execute(s)
    out = {}
    for q in queries(qdir):
        cur = con.execute(q.read_text())
        names = [d[0] for d in cur.description]
        out[q.name] = [{n: plain(v) for n, v in zip(names, r)} for r in cur.fetchall()]
    return out


def spark_rows(tree, qdir):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("roce-analyze-queries")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.ansi.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for t in TABLES:
            df = (
                spark.read.option("mergeSchema", "true")
                .option("pathGlobFilter", "*.parquet")
                .parquet(f"{tree}/{t}")
            )
            df.createOrReplaceTempView(t)
        for s in statements((Path(qdir) / "engine.spark.sql").read_text()):
            spark.sql(s)
        out = {}
        for q in queries(qdir):
            df = spark.sql(q.read_text())
            out[q.name] = [{k: plain(v) for k, v in r.asDict().items()} for r in df.collect()]
        return out
    finally:
        spark.stop()


def main():
    engine, tree, qdir, dest = sys.argv[1:5]
    t = time.monotonic()
    rows = {"duckdb": duckdb_rows, "spark": spark_rows}[engine](tree, qdir)
    Path(dest).write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(f"{engine}: {len(rows)} queries in {time.monotonic() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
