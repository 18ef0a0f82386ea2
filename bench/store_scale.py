#!/usr/bin/env python3
"""Results store at scale: time and peak memory of `results list`,
`results list CAMPAIGN --limit 100`, `report` and `results export --format
long` as the store grows to 1 000, 10 000 and 100 000 runs.

A real loopback campaign (8 runs: IPv4/IPv6 x 64/1400 B x 2 repetitions,
0.3 s each, per-interval series and histograms; or with --flows 60, one
60-flow run per scenario) is run once by the wirebench under test, then
its rows -- runs and every table that refers to them -- are replicated in
SQL (new ids, repetitions shifted) until the store holds N runs, as the
acceptance check M1 does. Each command is timed by GNU time (elapsed and
CPU time user+sys, peak RSS) --reps times; medians are printed, then the growth ratios
between sizes. Everything lives in one temporary directory, removed at
the end; nothing is sent off loopback.

Measured 2026-11-27 06:35-06:52 UTC, schema 3 (documents in run_docs),
on 2 cores shared with other builds (load average 13-15, so wall time
ran ~7x CPU time), --reps 3, medians; 6.6 KB documents with series and
histograms; elapsed / CPU (user+sys) / peak RSS:

    runs    list                 list 100 runs        report                export long
    1000    0.00 s/0.00 s/10 MB  0.00 s/0.00 s/10 MB  0.70 s/0.06 s/15 MB   0.63 s/0.05 s/13 MB
    10000   0.06 s/0.00 s/12 MB  0.04 s/0.00 s/10 MB  6.24 s/0.58 s/18 MB   5.27 s/0.50 s/26 MB
    100000  0.45 s/0.04 s/12 MB  0.12 s/0.00 s/12 MB  40.8 s/5.99 s/49 MB   36.4 s/5.11 s/152 MB

Before schema 3 (documents in `runs`, the same machine, load 15-20,
--reps 1) the 100 000-run report took 135.6 s / 11.7 s CPU and the list
4.05 s / 0.32 s. The one-pass histogram merge (after this table) took
the 100 000-run report from 5.1 to 4.2 s CPU (2 runs each, alternated,
load 14, the same report JSON).

PostgreSQL (--store postgres), schema 3, 2026-11-27 06:53 UTC, load
8-10, --reps 3, medians, 6.1 KB documents:

    runs    list                 list 100 runs        report               export long
    1000    0.02 s/0.00 s/9 MB   0.02 s/0.00 s/9 MB   0.32 s/0.08 s/12 MB  0.21 s/0.08 s/11 MB
    10000   0.06 s/0.00 s/9 MB   0.06 s/0.00 s/9 MB   2.17 s/0.54 s/15 MB  1.75 s/0.58 s/24 MB
    100000  0.13 s/0.00 s/9 MB   0.04 s/0.00 s/9 MB   8.93 s/4.92 s/45 MB  9.62 s/7.07 s/149 MB
    (100 000: 07:00 UTC, load 4-6, --reps 1)

SQLite on a quiet host (2026-11-27 07:37 UTC, load 1-3, the same binary;
elapsed/CPU/peak):

    runs    docs             list                 report               export long
    100000  6.1 KB, 1 flow   0.07 s/0.04 s/10 MB  6.45 s/3.93 s/48 MB  8.05 s/5.05 s/150 MB  (--reps 3)
    1000    229 KB, 60 flows 0.00 s/0.00 s/9 MB   1.46 s/1.45 s/14 MB  0.06 s/0.05 s/12 MB   (--reps 1)
    10000   229 KB, 60 flows 0.01 s/0.01 s/10 MB  13.8 s/13.7 s/18 MB  0.55 s/0.52 s/25 MB   (--reps 1, 2.3 GB store)

100 000 60-flow runs (a 23 GB store) did not fit this machine's disk; the
report grows linearly (x9.4 from 1 000 to 10 000), so it would take about
140 s there: it parses every document for the histograms and series,
where a per-run figures table written at store time would not.

Memory stays flat (list) or grows slowly (report: per-scenario samples;
export: one record per run without documents); report time is reading
every document for the series and histograms.

With --store postgres the same is measured on PostgreSQL: a server of
its own (initdb as the `postgres` user, as root; the Debian package
postgresql) in the temporary directory, reached on a Unix socket there,
the campaign run into it by `--db postgres://…` and its rows replicated
in SQL (psql) the same way; the server is stopped and removed at the end.

    python3 bench/store_scale.py [--wb target/release/wirebench]
        [--sizes 1000,10000,100000] [--flows 1] [--reps 3] [--store sqlite|postgres]
"""
import argparse, glob, os, pwd, signal, shutil, socket, sqlite3, statistics, subprocess, sys, tempfile

CAMPAIGN = """name = "bench-store"
repetitions = 2
duration_s = 0.3
pause_s = 0
interval_ms = 100
[loopback]
[matrix]
ip = [4, 6]
transport = ["udp"]
payload = [64, 1400]
pps = [1000]
flows = [{flows}]
"""


def replicate(db, n):
    c = sqlite3.connect(db)
    # The campaign's own runs: copies shift their repetitions by 1000 and up.
    base = c.execute("select max(id) from runs where repetition < 1000").fetchone()[0]
    have = c.execute("select count(*) from runs").fetchone()[0]
    cols = [r[1] for r in c.execute("pragma table_info(runs)")]
    dep = [t for (t,) in c.execute("select name from sqlite_master where type='table'")
           if t != 'runs' and 'run_id' in [r[1] for r in c.execute(f"pragma table_info({t})")]]
    k = have // base
    while have < n:
        sel = ",".join(f"id + {k * base}" if x == 'id' else
                       f"repetition + {1000 * k}" if x == 'repetition' else x for x in cols)
        c.execute(f"insert into runs ({','.join(cols)}) select {sel} from runs where id <= {base}")
        for t in dep:
            tc = [x[1] for x in c.execute(f"pragma table_info({t})")]
            s = ",".join(f"run_id + {k * base}" if x == 'run_id' else x for x in tc)
            c.execute(f"insert into {t} ({','.join(tc)}) select {s} from {t} where run_id <= {base}")
        have += base
        k += 1
    c.commit()
    c.execute("pragma wal_checkpoint(truncate)")
    return c.execute("select count(*) from runs").fetchone()[0]


class Pg:
    """A throw-away PostgreSQL server in directory d (trusted Unix socket)."""

    def __init__(self, d):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(p.split("/")[4]))
        if not bins or os.geteuid() != 0:
            sys.exit("--store postgres needs root and the postgresql package")
        self.bin = os.path.dirname(bins[-1])
        self.data, self.sock = os.path.join(d, "pg"), os.path.join(d, "sock")
        os.makedirs(self.sock)
        pw = pwd.getpwnam("postgres")
        for x in (d, self.sock):
            os.chown(x, pw.pw_uid, pw.pw_gid)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.pg("initdb", "-D", self.data, "-U", "wb", "--auth=trust", "--no-sync")
        self.pg("pg_ctl", "-D", self.data, "-w", "-l", os.path.join(d, "pg.log"), "-o",
                f"-p {self.port} -k {self.sock} -c listen_addresses='' -c fsync=off", "start")
        self.url = f"postgres://wb@{self.sock.replace('/', '%2F')}:{self.port}/postgres"

    def pg(self, prog, *args):
        subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.bin, prog), *args],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def sql(self, q):
        r = subprocess.run([os.path.join(self.bin, "psql"), "-XqAt", "-v", "ON_ERROR_STOP=1",
                            "-h", self.sock, "-p", str(self.port), "-U", "wb", "-d", "postgres",
                            "-c", "set search_path to wirebench; " + q],
                           check=True, capture_output=True, text=True, timeout=1200)
        return r.stdout.strip()

    def stop(self):
        self.pg("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")


def replicate_pg(pg, n):
    """replicate() in PostgreSQL's SQL."""
    base = int(pg.sql("select max(id) from runs where repetition < 1000"))
    have = int(pg.sql("select count(*) from runs"))
    cols = pg.sql("select column_name from information_schema.columns where table_schema = "
                  "'wirebench' and table_name = 'runs' order by ordinal_position").split()
    dep = {t: pg.sql(f"select column_name from information_schema.columns where table_schema "
                     f"= 'wirebench' and table_name = '{t}' order by ordinal_position").split()
           for t in ("run_docs", "run_metrics", "run_facts")}
    k = have // base
    while have < n:
        sel = ",".join(f"id + {k * base}" if x == 'id' else
                       f"repetition + {1000 * k}" if x == 'repetition' else x for x in cols)
        q = [f"insert into runs ({','.join(cols)}) select {sel} from runs where id <= {base}"]
        for t, tc in dep.items():
            s = ",".join(f"run_id + {k * base}" if x == 'run_id' else x for x in tc)
            q.append(f"insert into {t} ({','.join(tc)}) select {s} from {t} where run_id <= {base}")
        pg.sql("; ".join(q))
        have += base
        k += 1
    pg.sql("analyze runs; analyze run_metrics; analyze run_facts")
    return int(pg.sql("select count(*) from runs"))


def measure(cmd, d):
    t = os.path.join(d, "time")
    r = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", t] + cmd,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode()[-300:]}")
    s, u, k, kb = open(t).read().split()[-4:]
    return float(s), float(u) + float(k), int(kb) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wb", default="target/release/wirebench")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--flows", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    a = ap.parse_args()
    wb = os.path.abspath(a.wb)
    # A stopped bench still removes its store (SIGTERM runs `finally`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    d = tempfile.mkdtemp(prefix="wb-bench-store-")
    pg = None
    try:
        toml = os.path.join(d, "c.toml")
        open(toml, "w").write(CAMPAIGN.format(flows=a.flows))
        db = os.path.join(d, "s.db")
        if a.store == "postgres":
            pg = Pg(d)
            db = pg.url
        r = subprocess.run([wb, "run", toml, "--db", db], capture_output=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"campaign failed: {r.stderr.decode()[-300:]}")
        q = "select avg(length(result)) from run_docs"
        doc = float(pg.sql(q)) if pg else sqlite3.connect(db).execute(q).fetchone()[0]
        print(f"wirebench {wb}; {a.store}; documents {doc / 1024:.1f} KB each "
              f"({a.flows} flow(s)); medians of {a.reps}")
        cmds = {
            "list": ["results", "list", "--db", db],
            "list 100 runs": ["results", "list", "bench-store", "--limit", "100", "--db", db],
            "report": ["report", "--db", db, "-o", os.path.join(d, "r.html")],
            "export long": ["results", "export", "bench-store", "--format", "long",
                            "-o", os.path.join(d, "x.csv"), "--db", db],
        }
        rows = {}
        print(f"{'runs':>7}  {'store MB':>8}  " + "  ".join(f"{k:>27}" for k in cmds))
        for n in [int(x) for x in a.sizes.split(",")]:
            if pg:
                got = replicate_pg(pg, n)
                mb = int(pg.sql("select pg_database_size('postgres')")) / 2**20
            else:
                got = replicate(db, n)
                mb = os.path.getsize(db) / 2**20
            cells = []
            for k, c in cmds.items():
                m = [measure([wb] + c, d) for _ in range(a.reps)]
                s = statistics.median(x[0] for x in m)
                cpu = statistics.median(x[1] for x in m)
                rss = statistics.median(x[2] for x in m)
                rows[(n, k)] = (s, rss)
                cells.append(f"{s:7.2f} s {cpu:6.2f} cpu {rss:5.0f} MB")
            print(f"{got:>7}  {mb:8.0f}  " + "  ".join(f"{c:>27}" for c in cells), flush=True)
        sizes = [int(x) for x in a.sizes.split(",")]
        for lo, hi in zip(sizes, sizes[1:]):
            print(f"growth {lo} -> {hi} runs (x{hi / lo:.0f}): " + "; ".join(
                f"{k} time x{rows[(hi, k)][0] / max(rows[(lo, k)][0], 0.01):.1f}, "
                f"memory x{rows[(hi, k)][1] / rows[(lo, k)][1]:.1f}" for k in cmds))
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
