#!/usr/bin/env python3
"""Samples the CPU time of every thread of a process, to see where a step's cores go.

  thread_cpu.py MATCH OUT.csv [PERIOD_S]

Waits for a process whose command line contains MATCH, then every PERIOD_S (default 0.5) writes
one row per thread: wall time (s, CLOCK_MONOTONIC), thread id, its real-time priority (the NVMe
threads run one above the others under chrt: 0 without chrt), its utime+stime (s, cumulative), the
whole machine's busy and steal time (s, cumulative, from /proc/stat), and the thread's name (the
engine names its threads by what they do: "zinf compute", "zinf adam", "zinf io reap"; OpenBLAS's
workers keep the process's name, "zinf"). Ends when the process does.
"""
import os
import sys
import time

match, out = sys.argv[1], sys.argv[2]
period = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
tick = os.sysconf("SC_CLK_TCK")


def find():
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if match in cmd and "thread_cpu.py" not in cmd and os.path.basename(cmd.split(" ")[0]) == "zinf":
            return int(pid)
    return None


def machine():
    f = open("/proc/stat").readline().split()[1:]
    v = [int(x) / tick for x in f]
    idle = v[3] + v[4]
    steal = v[7] if len(v) > 7 else 0.0
    return sum(v[:8]) - idle - steal, steal


pid = None
while pid is None:
    pid = find()
    if pid is None:
        time.sleep(0.2)
with open(out, "w") as f:
    f.write("t,tid,rt_priority,cpu_s,machine_busy_s,machine_steal_s,name\n")
    while os.path.exists(f"/proc/{pid}"):
        now = time.monotonic()
        busy, steal = machine()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            break
        for tid in tids:
            try:
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")].replace(",", " ")
            fields = st[st.rindex(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            rt = int(fields[37])                              # rt_priority
            f.write(f"{now:.3f},{tid},{rt},{cpu:.2f},{busy:.2f},{steal:.2f},{name}\n")
        f.flush()
        time.sleep(period)
