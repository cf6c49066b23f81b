#!/usr/bin/env python3
"""Read an llmforge TensorBoard event file with TensorBoard's own reader.

Checks, in order:
  1. framing: the file is a sequence of TFRecords (u64 LE length, masked
     CRC-32C of the length, data, masked CRC-32C of the data) with nothing
     left over, every CRC right (TensorBoard's masked_crc32c);
  2. encoding: every record parses as a tensorflow.Event (TensorBoard's
     compiled event.proto) and serializes back to exactly the same bytes,
     so llmforge writes the canonical protobuf encoding;
  3. loading: TensorBoard's event file loader yields one event per record,
     and EventAccumulator (what the TensorBoard UI uses) gives the scalars,
     printed as `tag: (step, value) ...`.

Options:
  --compare LOG.jsonl   check the scalars against an llmforge log.jsonl
                        (records with "type" or "kind" train/eval; train
                        loss, lr, grad_norm, tokens_per_sec -> train/<key>;
                        eval val_loss, train_loss -> eval/<key>; null values
                        skipped), as float32 (relative tolerance 2^-22).
                        Every log value must be in the event file at its
                        step, and no extra points for those tags may be.
  --json OUT            write {"file_version", "scalars": {tag: [[wall_time,
                        step, value], ...]}} as the reader returned them
                        (how tests/fixtures/tb_expected.json is made).

Exit status: 0 when everything checks, 1 on any mismatch or bad record,
2 on usage errors. Needs `pip install tensorboard` (no TensorFlow).

Example:
  python3 tools/check_tensorboard.py tests/fixtures/tb_events.bin \
      --compare tests/fixtures/tb_log.jsonl
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
except ImportError as e:  # pragma: no cover
    sys.exit("check_tensorboard: needs the tensorboard package (pip install tensorboard): %s" % e)

TRAIN_KEYS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
              "tokens_per_sec": "train/tokens_per_sec"}
EVAL_KEYS = {"val_loss": "eval/val_loss", "train_loss": "eval/train_loss"}


def read_frames(path, problems):
    """The data of every TFRecord in the file, CRCs verified."""
    with open(path, "rb") as f:
        buf = f.read()
    frames, pos = [], 0
    while pos < len(buf):
        if len(buf) - pos < 12:
            problems.append("offset %d: truncated record header" % pos)
            break
        (n,) = struct.unpack_from("<Q", buf, pos)
        (hcrc,) = struct.unpack_from("<I", buf, pos + 8)
        if masked_crc32c(buf[pos:pos + 8]) != hcrc:
            problems.append("offset %d: bad length CRC" % pos)
            break
        if len(buf) - pos - 12 < n + 4:
            problems.append("offset %d: record of %d bytes is truncated" % (pos, n))
            break
        data = buf[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack_from("<I", buf, pos + 12 + n)
        if masked_crc32c(data) != dcrc:
            problems.append("offset %d: bad data CRC" % pos)
        frames.append(data)
        pos += 12 + n + 4
    return frames


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same_f32(tb, want):
    w = f32(want)
    if math.isnan(tb) or math.isnan(w):
        return math.isnan(tb) and math.isnan(w)
    if math.isinf(tb) or math.isinf(w):
        return tb == w
    return abs(tb - w) <= 2.0 ** -22 * max(abs(w), 1e-30)


def load_log(path):
    """{tag: {step: value}} from a log.jsonl (the last record wins, as after a resume)."""
    want = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise SystemExit("check_tensorboard: %s:%d: bad JSON: %s" % (path, lineno, e))
            kind = rec.get("type", rec.get("kind"))
            keys = TRAIN_KEYS if kind == "train" else EVAL_KEYS if kind == "eval" else None
            if keys is None or "step" not in rec:
                continue
            for key, tag in keys.items():
                v = rec.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    want.setdefault(tag, {})[int(rec["step"])] = float(v)
    return want


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("events", help="an events.out.tfevents.* file (any name is accepted)")
    ap.add_argument("--compare", metavar="LOG.jsonl")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--quiet", action="store_true", help="do not print every scalar")
    args = ap.parse_args()
    if not os.path.isfile(args.events):
        print("check_tensorboard: '%s' is not a file" % args.events, file=sys.stderr)
        return 2

    problems = []
    frames = read_frames(args.events, problems)
    file_version = None
    for i, data in enumerate(frames):
        ev = event_pb2.Event.FromString(data)
        if ev.SerializeToString() != data:
            problems.append("record %d: not the canonical protobuf encoding" % i)
        if ev.HasField("file_version"):
            file_version = ev.file_version
            if i != 0:
                problems.append("record %d: file_version after the first record" % i)
    if not frames or file_version != "brain.Event:2":
        problems.append("first record is not file_version brain.Event:2 (got %r)" % file_version)

    # TensorBoard only treats names containing "tfevents" as event files.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.abspath(args.events)
        if "tfevents" not in os.path.basename(path):
            link = os.path.join(tmp, "events.out.tfevents.0.check")
            os.symlink(path, link)
            path = link
        loaded = sum(1 for _ in event_file_loader.LegacyEventFileLoader(path).Load())
        if loaded != len(frames):
            problems.append("TensorBoard's loader read %d events, the file holds %d records" % (loaded, len(frames)))
        acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        scalars = {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

    print("%s: %d records, file_version %s, %d scalar tags, %d points" %
          (args.events, len(frames), file_version, len(scalars), sum(len(v) for v in scalars.values())))
    if not args.quiet:
        for tag in sorted(scalars):
            print("%s: %s" % (tag, " ".join("(%d, %.9g)" % (s, v) for _, s, v in scalars[tag])))

    if args.json:
        # one point per line; json writes floats with repr, so they read back exactly
        lines = ['{"file_version": %s,' % json.dumps(file_version), ' "scalars": {']
        for i, tag in enumerate(sorted(scalars)):
            pts = ",\n".join("   " + json.dumps(list(p)) for p in scalars[tag])
            lines.append("  %s: [\n%s\n  ]%s" % (json.dumps(tag), pts, "," if i + 1 < len(scalars) else ""))
        lines.append(" }\n}\n")
        with open(args.json, "w") as f:
            f.write("\n".join(lines))

    if args.compare:
        want = load_log(args.compare)
        checked = 0
        for tag in sorted(want):
            got = {}
            for _, step, value in scalars.get(tag, []):
                got[step] = value  # the last point at a step wins, as in the log
            for step in sorted(want[tag]):
                checked += 1
                if step not in got:
                    problems.append("%s step %d: in the log (%.9g), not in the event file" % (tag, step, want[tag][step]))
                elif not same_f32(got[step], want[tag][step]):
                    problems.append("%s step %d: event file %.9g, log %.9g" % (tag, step, got[step], want[tag][step]))
            for step in sorted(set(got) - set(want[tag])):
                problems.append("%s step %d: in the event file (%.9g), not in the log" % (tag, step, got[step]))
        print("compared %d values from %s" % (checked, args.compare))
        if checked == 0:
            problems.append("the log holds no train/eval values to compare")

    for p in problems:
        print("MISMATCH: " + p, file=sys.stderr)
    print("FAIL" if problems else "OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
