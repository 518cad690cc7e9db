#!/usr/bin/env python3
"""The TensorBoard event file of a real training run, decoded independently.

usage: /usr/bin/python3 tests/golden/test_tensorboard.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL.

A 6-step gpt2-tiny run with validation every 3 steps writes run.dir; tb_reader.py
(plain Python: TFRecord framing, masked CRC-32C, protobuf wire format) decodes its
events.out.tfevents.* file. Checks: every record's CRCs, the brain.Event:2 header,
train/* and memory/* scalars at steps 1..6 equal to metrics.jsonl to float32
precision, val/loss at steps 3 and 6 only, plausible wall times, and that the
reader rejects every single-byte corruption of the file and keeps the complete
records of a torn one. Set CT_KEEP_TMP=1 to keep the working directory.
"""

import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tb_reader  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
failures = []


def check(label, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail else ""))
    if not ok:
        failures.append(label)


def run(*args):
    print("+ ctrain " + " ".join(args), flush=True)
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
    return p.returncode


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_close(a, b):
    """a and b agree to float32 precision: at most one float32 ulp apart."""
    if a == b:
        return True
    ia = struct.unpack("<i", struct.pack("<f", f32(a)))[0]
    ib = struct.unpack("<i", struct.pack("<f", f32(b)))[0]
    return abs(ia - ib) <= 1


def reader_self_check():
    check("reader crc32c('123456789') = e3069283", tb_reader.crc32c(b"123456789") == 0xE3069283)
    check("reader crc32c(32 zero bytes) = 8a9136aa", tb_reader.crc32c(bytes(32)) == 0x8A9136AA)


def corruption_checks(raw, n_events):
    # Every single-byte change lands in a length, a CRC or the data of some
    # record; CRC-32C catches any error burst of up to 32 bits, so the reader
    # must reject each one.
    missed = []
    for pos in range(len(raw)):
        bad = bytearray(raw)
        bad[pos] ^= 0x20
        try:
            tb_reader.decode_bytes(bytes(bad))
            missed.append(pos)
        except tb_reader.TBFormatError:
            pass
    check("every single-byte corruption of the %d-byte file is detected" % len(raw), not missed,
          "missed at offsets %s" % missed[:10] if missed else "")
    # a torn tail (a crash mid-write) keeps every complete record
    events, truncated = tb_reader.decode_bytes(raw[:-3])
    check("a torn last record leaves the earlier ones readable",
          truncated and len(events) == n_events - 1, "%d events, truncated=%s" % (len(events), truncated))


def main():
    tmp = tempfile.mkdtemp(prefix="ct_tb_")
    try:
        reader_self_check()
        shard = os.path.join(tmp, "synth.bin")
        if run("synth", "--out", shard, "--tokens", "4000", "--vocab", "64") != 0:
            check("ctrain synth", False)
            return
        run_dir = os.path.join(tmp, "run")
        t_start = time.time()
        rc = run("train", "model.preset=gpt2-tiny", "train.steps=6", "train.batch_size=2",
                 "train.seq_len=16", "train.eval_every=3", "train.eval_batches=2",
                 "data.train=" + shard, "data.val=" + shard, "run.dir=" + run_dir)
        t_end = time.time()
        check("ctrain train exits 0", rc == 0)
        if rc != 0:
            return
        files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
        check("one events.out.tfevents.* file in run.dir", len(files) == 1, str(files))
        if len(files) != 1:
            return
        with open(files[0], "rb") as f:
            raw = f.read()
        try:
            events, truncated = tb_reader.decode_bytes(raw)
        except tb_reader.TBFormatError as e:
            check("every record's length and data CRC match", False, str(e))
            return
        check("every record's length and data CRC match, no torn tail", not truncated)
        check("first event is file_version brain.Event:2",
              bool(events) and events[0]["file_version"] == "brain.Event:2" and not events[0]["values"])

        # (step, tag) -> value, from the file and from metrics.jsonl
        tb = {}
        dup = []
        for e in events[1:]:
            check_wall = t_start - 5 <= e["wall_time"] <= t_end + 5
            if not check_wall:
                check("wall_time within the run", False, "%.3f not in [%.3f, %.3f]" %
                      (e["wall_time"], t_start, t_end))
            for tag, value in e["values"]:
                if (e["step"], tag) in tb:
                    dup.append((e["step"], tag))
                tb[(e["step"], tag)] = value
        check("no (step, tag) written twice", not dup, str(dup))
        walls = [e["wall_time"] for e in events]
        check("wall times never go backwards", walls == sorted(walls))

        metrics = {}
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                metrics[(m["step"], m["split"])] = m
        train_keys = [("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                      ("train/tokens_per_s", "tokens_per_s")]
        for step in range(1, 7):
            m = metrics.get((step, "train"))
            for tag, key in train_keys:
                got = tb.get((step, tag))
                ok = m is not None and got is not None and f32_close(got, m[key])
                check("step %d %s equals metrics.jsonl %s" % (step, tag, key), ok,
                      "tb %r, jsonl %r" % (got, m and m[key]))
            peak = tb.get((step, "memory/peak_bytes"))
            cur = tb.get((step, "memory/current_bytes"))
            check("step %d memory/peak_bytes >= current_bytes > 0" % step,
                  peak is not None and cur is not None and peak >= cur > 0, "%r %r" % (peak, cur))
        steps = sorted({s for (s, _) in tb})
        check("scalars only at steps 1..6", steps == list(range(1, 7)), str(steps))
        val_steps = sorted(s for (s, tag) in tb if tag == "val/loss")
        check("val/loss at steps 3 and 6 only", val_steps == [3, 6], str(val_steps))
        for step in val_steps:
            m = metrics.get((step, "val"))
            got = tb[(step, "val/loss")]
            check("step %d val/loss equals metrics.jsonl" % step,
                  m is not None and f32_close(got, m["loss"]), "tb %r, jsonl %r" % (got, m and m["loss"]))
        tags = sorted({t for (_, t) in tb})
        print("tags:", ", ".join(tags))

        corruption_checks(raw, len(events))
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)
