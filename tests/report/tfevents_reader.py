#!/usr/bin/env python3
# Independent reader and checker of TensorBoard event files (tfevents).
#
# Why this is independent of wantrain's C++ writer: a test that decodes the
# writer's output with the writer's own code or .proto files would only show
# that the writer agrees with itself. This file shares nothing with it:
#   * the message schema is built here by hand (descriptor_pb2), with the field
#     numbers of TensorBoard's public schema (tensorflow/core/util/event.proto
#     and tensorflow/core/framework/summary.proto), not generated from any
#     .proto file of this repository;
#   * TFRecord framing and its masked CRC32C are decoded here, with the CRC32C
#     of the `crc32c` module (python3-crc32c), not the writer's CRC code;
#   * PNG images are validated here with zlib only (chunk CRCs, IHDR, and the
#     size of the decompressed image data).
#
# Run it with Debian's /usr/bin/python3 (python3-protobuf, python3-crc32c).
#
# Usage:
#   tfevents_reader.py dump DIR
#   tfevents_reader.py check DIR [--scalar TAG=STEPS]... [--image TAG=STEPS]...
#                                [--start-steps STEPS] [--tags-at-least N]
#   tfevents_reader.py selftest
# STEPS is a comma list such as 2,4,6 (it may be empty: the tag must not occur).

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import zlib

import crc32c as _crc32c_mod
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PROG = "tfevents_reader"
FILE_VERSION_PREFIX = "brain.Event:"

# ---------------------------------------------------------------------------
# Hand-built schema (proto3), package "tbreader".
# ---------------------------------------------------------------------------

_FDP = descriptor_pb2.FieldDescriptorProto


def _add_field(msg, name, number, ftype, type_name=None, oneof_index=None,
               label=_FDP.LABEL_OPTIONAL):
    f = msg.field.add()
    f.name = name
    f.number = number
    f.type = ftype
    f.label = label
    if type_name is not None:
        f.type_name = type_name
    if oneof_index is not None:
        f.oneof_index = oneof_index
    return f


def _build_file_proto():
    fp = descriptor_pb2.FileDescriptorProto()
    fp.name = "tbreader/tfevents_reader_schema.proto"
    fp.package = "tbreader"
    fp.syntax = "proto3"

    # message Image { int32 height = 1; int32 width = 2; int32 colorspace = 3;
    #                 bytes encoded_image_string = 4; }   (nested in Summary)
    # message Value { string node_name = 7; string tag = 1;
    #                 oneof value { float simple_value = 2; Image image = 4; } }
    summary = fp.message_type.add()
    summary.name = "Summary"
    image = summary.nested_type.add()
    image.name = "Image"
    _add_field(image, "height", 1, _FDP.TYPE_INT32)
    _add_field(image, "width", 2, _FDP.TYPE_INT32)
    _add_field(image, "colorspace", 3, _FDP.TYPE_INT32)
    _add_field(image, "encoded_image_string", 4, _FDP.TYPE_BYTES)
    value = summary.nested_type.add()
    value.name = "Value"
    value.oneof_decl.add().name = "value"
    _add_field(value, "node_name", 7, _FDP.TYPE_STRING)
    _add_field(value, "tag", 1, _FDP.TYPE_STRING)
    _add_field(value, "simple_value", 2, _FDP.TYPE_FLOAT, oneof_index=0)
    _add_field(value, "image", 4, _FDP.TYPE_MESSAGE,
               type_name=".tbreader.Summary.Image", oneof_index=0)
    _add_field(summary, "value", 1, _FDP.TYPE_MESSAGE,
               type_name=".tbreader.Summary.Value", label=_FDP.LABEL_REPEATED)

    # message SessionLog { enum SessionStatus {...}; SessionStatus status = 1;
    #                      string checkpoint_path = 2; string msg = 3; }
    slog = fp.message_type.add()
    slog.name = "SessionLog"
    status_enum = slog.enum_type.add()
    status_enum.name = "SessionStatus"
    for name, number in (("STATUS_UNSPECIFIED", 0), ("START", 1), ("STOP", 2),
                         ("CHECKPOINT", 3)):
        v = status_enum.value.add()
        v.name = name
        v.number = number
    _add_field(slog, "status", 1, _FDP.TYPE_ENUM,
               type_name=".tbreader.SessionLog.SessionStatus")
    _add_field(slog, "checkpoint_path", 2, _FDP.TYPE_STRING)
    _add_field(slog, "msg", 3, _FDP.TYPE_STRING)

    # message Event { double wall_time = 1; int64 step = 2;
    #   oneof what { string file_version = 3; bytes graph_def = 4;
    #                Summary summary = 5; SessionLog session_log = 7; } }
    event = fp.message_type.add()
    event.name = "Event"
    event.oneof_decl.add().name = "what"
    _add_field(event, "wall_time", 1, _FDP.TYPE_DOUBLE)
    _add_field(event, "step", 2, _FDP.TYPE_INT64)
    _add_field(event, "file_version", 3, _FDP.TYPE_STRING, oneof_index=0)
    _add_field(event, "graph_def", 4, _FDP.TYPE_BYTES, oneof_index=0)
    _add_field(event, "summary", 5, _FDP.TYPE_MESSAGE,
               type_name=".tbreader.Summary", oneof_index=0)
    _add_field(event, "session_log", 7, _FDP.TYPE_MESSAGE,
               type_name=".tbreader.SessionLog", oneof_index=0)
    return fp


def _build_classes():
    # A private pool: message_factory.GetMessages() of protobuf 4.21 adds the
    # file to the process-wide default pool, which could clash with other
    # users of the names; a private pool cannot.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_build_file_proto())
    names = ("tbreader.Event", "tbreader.Summary", "tbreader.SessionLog")
    out = {}
    for name in names:
        desc = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            out[name] = message_factory.GetMessageClass(desc)
        else:  # protobuf 4.21 (Debian 12)
            out[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return out


_CLASSES = _build_classes()
Event = _CLASSES["tbreader.Event"]
Summary = _CLASSES["tbreader.Summary"]
SessionLog = _CLASSES["tbreader.SessionLog"]
_STATUS_ENUM = SessionLog.DESCRIPTOR.enum_types_by_name["SessionStatus"]
SESSION_START = _STATUS_ENUM.values_by_name["START"].number


def status_name(number):
    v = _STATUS_ENUM.values_by_number.get(number)
    return v.name if v is not None else "UNKNOWN_%d" % number


# ---------------------------------------------------------------------------
# TFRecord framing.
# ---------------------------------------------------------------------------

class EventFileError(Exception):
    """A framing, CRC, parse or content error, naming the file and offset."""


def crc32c(data):
    return _crc32c_mod.crc32c(bytes(data)) & 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data):
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data +
            struct.pack("<I", masked_crc32c(data)))


def iter_records(path):
    """Yields (offset, data) per record; raises EventFileError on any fault."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < 12:
            raise EventFileError("%s: offset %d: truncated record header (%d bytes left, 12 needed)"
                                 % (path, pos, n - pos))
        header = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if len_crc != masked_crc32c(header):
            raise EventFileError("%s: offset %d: length CRC mismatch (stored 0x%08x, computed 0x%08x)"
                                 % (path, pos, len_crc, masked_crc32c(header)))
        data_start = pos + 12
        if length > n - data_start or n - data_start - length < 4:
            raise EventFileError("%s: offset %d: truncated record (length %d, %d bytes left after header)"
                                 % (path, pos, length, n - data_start))
        data = buf[data_start:data_start + length]
        (data_crc,) = struct.unpack("<I", buf[data_start + length:data_start + length + 4])
        if data_crc != masked_crc32c(data):
            raise EventFileError("%s: offset %d: data CRC mismatch (stored 0x%08x, computed 0x%08x)"
                                 % (path, pos, data_crc, masked_crc32c(data)))
        yield pos, data
        pos = data_start + length + 4


def read_events(path):
    """All Event messages of one file, framing and CRCs checked; the first
    event must carry a file_version starting with "brain.Event:"."""
    events = []
    for offset, data in iter_records(path):
        ev = Event()
        try:
            ev.ParseFromString(data)
        except Exception as e:  # DecodeError, or RuntimeError from some backends
            raise EventFileError("%s: offset %d: record is not a valid Event: %s"
                                 % (path, offset, e))
        if not events:
            if ev.WhichOneof("what") != "file_version" or \
                    not ev.file_version.startswith(FILE_VERSION_PREFIX):
                raise EventFileError("%s: offset %d: first event has no file_version starting with %r"
                                     % (path, offset, FILE_VERSION_PREFIX))
        events.append(ev)
    if not events:
        raise EventFileError("%s: offset 0: no records (a file_version event is required)" % path)
    return events


def event_files(directory):
    return sorted(name for name in os.listdir(directory)
                  if "tfevents" in name and os.path.isfile(os.path.join(directory, name)))


def read_dir(directory):
    """[(file name, [Event, ...]), ...] for every *tfevents* file, in sorted
    name order."""
    return [(name, read_events(os.path.join(directory, name)))
            for name in event_files(directory)]


# ---------------------------------------------------------------------------
# Summaries of the events.
# ---------------------------------------------------------------------------

def collect(files):
    """Scalars, images and session logs of all files, in the order read."""
    scalars, images, session_logs = {}, {}, []
    records = 0
    for _name, events in files:
        for ev in events:
            records += 1
            what = ev.WhichOneof("what")
            if what == "summary":
                for v in ev.summary.value:
                    kind = v.WhichOneof("value")
                    if kind == "simple_value":
                        scalars.setdefault(v.tag, []).append((ev.step, v.simple_value))
                    elif kind == "image":
                        images.setdefault(v.tag, []).append((ev.step, v.image))
            elif what == "session_log":
                session_logs.append((ev.step, ev.session_log.status))
    return records, scalars, images, session_logs


# ---------------------------------------------------------------------------
# PNG validation (zlib only).
# ---------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
COLORSPACE_OF_PNG_TYPE = {0: 1, 2: 3, 6: 4}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def parse_png(data):
    """Returns (width, height, bit_depth, colour_type) or raises ValueError."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("no PNG signature")
    pos = len(PNG_SIGNATURE)
    chunks = []
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError("truncated chunk at byte %d" % pos)
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        ctype = data[pos + 4:pos + 8]
        if length > len(data) - pos - 12:
            raise ValueError("truncated %r chunk at byte %d" % (ctype, pos))
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if crc != zlib.crc32(ctype + body) & 0xFFFFFFFF:
            raise ValueError("CRC mismatch in %r chunk at byte %d" % (ctype, pos))
        chunks.append((ctype, body))
        pos += 12 + length
        if ctype == b"IEND":
            break
    if pos != len(data):
        raise ValueError("%d bytes after IEND" % (len(data) - pos))
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise ValueError("first chunk is not a 13-byte IHDR")
    if chunks[-1][0] != b"IEND" or chunks[-1][1]:
        raise ValueError("no empty IEND chunk at the end")
    width, height, depth, ctype_, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if not (0 < width < 2 ** 31 and 0 < height < 2 ** 31):
        raise ValueError("bad size %dx%d" % (width, height))
    if ctype_ not in _PNG_DEPTHS or depth not in _PNG_DEPTHS[ctype_]:
        raise ValueError("bad colour type %d / bit depth %d" % (ctype_, depth))
    if comp != 0 or filt != 0 or interlace not in (0, 1):
        raise ValueError("bad compression/filter/interlace method %d/%d/%d" % (comp, filt, interlace))
    idat_idx = [i for i, (t, _) in enumerate(chunks) if t == b"IDAT"]
    if not idat_idx:
        raise ValueError("no IDAT chunk")
    if idat_idx != list(range(idat_idx[0], idat_idx[-1] + 1)):
        raise ValueError("IDAT chunks are not consecutive")
    if ctype_ == 3 and not any(t == b"PLTE" for t, _ in chunks):
        raise ValueError("palette image without PLTE")
    # Size of the filtered scanlines, per pass.
    bpp_bits = _PNG_CHANNELS[ctype_] * depth
    passes = [(0, 0, 1, 1)] if interlace == 0 else _ADAM7
    rows = []  # row byte counts, without the filter byte
    for xs, ys, dx, dy in passes:
        pw = (width - xs + dx - 1) // dx if width > xs else 0
        ph = (height - ys + dy - 1) // dy if height > ys else 0
        if pw and ph:
            rows += [(pw * bpp_bits + 7) // 8] * ph
    expected = sum(r + 1 for r in rows)
    d = zlib.decompressobj()
    try:
        raw = d.decompress(b"".join(chunks[i][1] for i in idat_idx), expected + 1)
    except zlib.error as e:
        raise ValueError("IDAT does not decompress: %s" % e)
    if not d.eof and len(raw) <= expected:
        raise ValueError("IDAT zlib stream is truncated")
    if len(raw) != expected:
        raise ValueError("IDAT holds %s bytes, %d expected for %dx%d"
                         % ("more than %d" % expected if len(raw) > expected else len(raw),
                            expected, width, height))
    p = 0
    for r in rows:
        if raw[p] > 4:
            raise ValueError("bad scanline filter type %d" % raw[p])
        p += r + 1
    return width, height, depth, ctype_


def image_problems(tag, step, image):
    where = "image %r at step %d" % (tag, step)
    try:
        w, h, _depth, ctype = parse_png(bytes(image.encoded_image_string))
    except ValueError as e:
        return ["%s: not a valid PNG: %s" % (where, e)]
    problems = []
    if (w, h) != (image.width, image.height):
        problems.append("%s: PNG is %dx%d but the Image message says %dx%d"
                        % (where, w, h, image.width, image.height))
    if image.colorspace not in (1, 3, 4):
        problems.append("%s: colorspace %d is not 1, 3 or 4" % (where, image.colorspace))
    expected = COLORSPACE_OF_PNG_TYPE.get(ctype)
    if expected is None:
        problems.append("%s: PNG colour type %d is not grey (0), RGB (2) or RGBA (6)" % (where, ctype))
    elif image.colorspace != expected:
        problems.append("%s: colorspace %d does not match PNG colour type %d (colorspace %d)"
                        % (where, image.colorspace, ctype, expected))
    return problems


# ---------------------------------------------------------------------------
# dump / check.
# ---------------------------------------------------------------------------

def dump(directory):
    files = read_dir(directory)
    records, scalars, images, session_logs = collect(files)
    return {
        "files": [name for name, _ in files],
        "records": records,
        "scalars": {tag: [[s, v] for s, v in vals] for tag, vals in scalars.items()},
        "images": {tag: [[s, im.width, im.height, len(im.encoded_image_string)] for s, im in vals]
                   for tag, vals in images.items()},
        "session_logs": [[s, status_name(st)] for s, st in session_logs],
    }


def parse_steps(text):
    text = text.strip()
    if not text:
        return []
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("bad step list %r (want e.g. 2,4,6)" % text)


def parse_tag_steps(text):
    tag, sep, steps = text.rpartition("=")
    if not sep or not tag:
        raise argparse.ArgumentTypeError("want TAG=STEPS, got %r" % text)
    return tag, parse_steps(steps)


def check(directory, scalar_specs=(), image_specs=(), start_steps=None, tags_at_least=None):
    """Returns (problems, summary line)."""
    if not os.path.isdir(directory):
        return ["%s: not a directory" % directory], None
    if not event_files(directory):
        return ["%s: no file whose name contains 'tfevents'" % directory], None
    try:
        files = read_dir(directory)
    except (EventFileError, OSError) as e:
        return [str(e)], None
    records, scalars, images, session_logs = collect(files)
    problems = []

    def steps_problem(kind, tag, got, want):
        if got == want:
            return
        dups = sorted({s for s in got if got.count(s) > 1})
        msg = "%s %r occurs at steps %s, expected %s" % (kind, tag, got, want)
        if dups:
            msg += " (duplicated: %s)" % dups
        problems.append(msg)

    for tag, want in scalar_specs:
        vals = scalars.get(tag, [])
        steps_problem("scalar", tag, [s for s, _ in vals], want)
        for s, v in vals:
            if not math.isfinite(v):
                problems.append("scalar %r at step %d is not finite: %r" % (tag, s, v))
    for tag, want in image_specs:
        steps_problem("image", tag, [s for s, _ in images.get(tag, [])], want)
    n_images = 0
    for tag, vals in images.items():
        for s, im in vals:
            n_images += 1
            problems += image_problems(tag, s, im)
    if start_steps is not None:
        got = [s for s, st in session_logs if st == SESSION_START]
        if got != start_steps:
            problems.append("SessionLog START events at steps %s, expected %s" % (got, start_steps))
    if tags_at_least is not None and len(scalars) < tags_at_least:
        problems.append("%d distinct scalar tags (%s), expected at least %d"
                        % (len(scalars), sorted(scalars), tags_at_least))
    summary = "OK: %d files, %d records, %d scalar tags, %d images" % (
        len(files), records, len(scalars), n_images)
    return problems, summary


# ---------------------------------------------------------------------------
# Self-test: a small Python writer, read back.
# ---------------------------------------------------------------------------

def make_png(width, height, colour_type, depth=8):
    channels = _PNG_CHANNELS[colour_type]
    row = (width * channels * depth + 7) // 8
    raw = b"".join(b"\x00" + bytes((x * 37 + y * 11) & 0xFF for x in range(row))
                   for y in range(height))

    def chunk(t, body):
        return struct.pack(">I", len(body)) + t + body + \
            struct.pack(">I", zlib.crc32(t + body) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + \
        chunk(b"IEND", b"")


def _ev(step, wall=1.7e9):
    ev = Event()
    ev.step = step
    ev.wall_time = wall + step
    return ev


def write_event_file(path, events):
    with open(path, "wb") as f:
        for ev in events:
            f.write(frame_record(ev.SerializeToString()))


def sample_events(first_step, last_step, with_start=True):
    evs = []
    ev = _ev(0)
    ev.file_version = "brain.Event:2"
    evs.append(ev)
    if with_start:
        ev = _ev(first_step)
        ev.session_log.status = SESSION_START
        evs.append(ev)
    for step in range(first_step, last_step + 1):
        ev = _ev(step)
        v = ev.summary.value.add()
        v.tag = "train/loss"
        v.simple_value = 1.0 / step
        v = ev.summary.value.add()
        v.tag = "train/lr"
        v.simple_value = 0.5
        evs.append(ev)
        if step % 2 == 0:
            ev = _ev(step)
            for tag, (w, h, ct) in (("img/grey", (5, 3, 0)), ("img/rgb", (4, 2, 2)),
                                    ("img/rgba", (3, 7, 6))):
                v = ev.summary.value.add()
                v.tag = tag
                v.image.width = w
                v.image.height = h
                v.image.colorspace = COLORSPACE_OF_PNG_TYPE[ct]
                v.image.encoded_image_string = make_png(w, h, ct)
            evs.append(ev)
    ev = _ev(last_step)
    ev.session_log.status = SessionLog.DESCRIPTOR.enum_types_by_name["SessionStatus"] \
        .values_by_name["STOP"].number
    evs.append(ev)
    return evs


def selftest():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    expect(crc32c(b"123456789") == 0xE3069283, "crc32c(b'123456789') != 0xE3069283")

    with tempfile.TemporaryDirectory(prefix="tfevents_selftest_") as d:
        p1 = os.path.join(d, "events.out.tfevents.1700000000.host.1")
        p2 = os.path.join(d, "events.out.tfevents.1700000100.host.1")
        write_event_file(p1, sample_events(1, 4))
        write_event_file(p2, sample_events(5, 6))
        open(os.path.join(d, "unrelated.txt"), "w").write("x")

        evs = read_events(p1)
        expect(len(evs) == 1 + 1 + 4 + 2 + 1, "record count of file 1: %d" % len(evs))
        expect(evs[0].file_version == "brain.Event:2", "file_version read back")
        expect(evs[2].summary.value[0].tag == "train/loss" and
               evs[2].summary.value[0].simple_value == 1.0, "scalar read back")
        expect(evs[1].session_log.status == SESSION_START, "session log read back")

        dumped = dump(d)
        expect(dumped["files"] == [os.path.basename(p1), os.path.basename(p2)], "file order")
        expect([s for s, _ in dumped["scalars"]["train/loss"]] == [1, 2, 3, 4, 5, 6], "loss steps")
        expect(dumped["images"]["img/rgb"][0][:3] == [2, 4, 2], "rgb image dims")
        expect(dumped["session_logs"] == [[1, "START"], [4, "STOP"], [5, "START"], [6, "STOP"]],
               "session logs: %s" % dumped["session_logs"])
        json.dumps(dumped)

        problems, line = check(d, [("train/loss", [1, 2, 3, 4, 5, 6]), ("train/lr", [1, 2, 3, 4, 5, 6])],
                               [("img/grey", [2, 4, 6])], [1, 5], 2)
        expect(not problems, "check of good files: %s" % problems)
        expect(line == "OK: 2 files, 15 records, 2 scalar tags, 9 images", "summary: %s" % line)
        problems, _ = check(d, [("train/loss", [1, 2, 3])], [("img/rgb", [2])], [1], 3)
        expect(len(problems) == 4, "check of wrong expectations: %s" % problems)

        # Every single flipped byte and every truncation inside a record must be found.
        good = open(p1, "rb").read()
        boundaries = {0}
        for off, data in iter_records(p1):
            boundaries.add(off + 16 + len(data))
        bad = os.path.join(d, "bad.bin")
        for i in range(len(good)):
            flipped = bytearray(good)
            flipped[i] ^= 0x01 << (i % 8)
            open(bad, "wb").write(bytes(flipped))
            try:
                read_events(bad)
                failures.append("flipped byte at %d not detected" % i)
            except EventFileError as e:
                expect("bad.bin: offset " in str(e), "error names file and offset: %s" % e)
        for n in range(len(good)):
            if n in boundaries:
                continue
            open(bad, "wb").write(good[:n])
            try:
                read_events(bad)
                failures.append("truncation to %d bytes not detected" % n)
            except EventFileError:
                pass
        # A wrong first event.
        ev = _ev(1)
        ev.file_version = "nope"
        write_event_file(bad, [ev])
        try:
            read_events(bad)
            failures.append("bad file_version not detected")
        except EventFileError:
            pass

    # PNG checks.
    for ct in (0, 2, 6):
        expect(parse_png(make_png(6, 5, ct))[:2] == (6, 5), "png %d parses" % ct)
    png = make_png(6, 5, 2)
    im = Summary().value.add().image
    im.width, im.height, im.colorspace, im.encoded_image_string = 6, 5, 3, png
    expect(not image_problems("t", 0, im), "good image")
    im.colorspace = 4
    expect(image_problems("t", 0, im), "wrong colorspace found")
    im.colorspace, im.width = 3, 7
    expect(image_problems("t", 0, im), "wrong width found")
    im.width = 6
    for i in range(len(png)):
        im.encoded_image_string = png[:i] + bytes([png[i] ^ 0x10]) + png[i + 1:]
        expect(image_problems("t", 0, im), "PNG byte flip at %d not found" % i)

    for f in failures:
        print("%s: selftest: %s" % (PROG, f), file=sys.stderr)
    if failures:
        return 1
    print("%s: selftest OK" % PROG)
    return 0


# ---------------------------------------------------------------------------
# CLI.
# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog="tfevents_reader.py",
                                 description="Independent TensorBoard event file reader/checker.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump", help="print a JSON summary of DIR's event files")
    p.add_argument("dir")
    p = sub.add_parser("check", help="validate DIR's event files")
    p.add_argument("dir")
    p.add_argument("--scalar", action="append", default=[], type=parse_tag_steps, metavar="TAG=STEPS")
    p.add_argument("--image", action="append", default=[], type=parse_tag_steps, metavar="TAG=STEPS")
    p.add_argument("--start-steps", type=parse_steps, default=None, metavar="STEPS")
    p.add_argument("--tags-at-least", type=int, default=None, metavar="N")
    sub.add_parser("selftest", help="write, read back and corrupt a small event file")
    args = ap.parse_args(argv)

    if args.cmd == "selftest":
        return selftest()
    if args.cmd == "dump":
        try:
            out = dump(args.dir)
        except (EventFileError, OSError) as e:
            print("%s: %s" % (PROG, e), file=sys.stderr)
            return 1
        json.dump(out, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    problems, line = check(args.dir, args.scalar, args.image, args.start_steps, args.tags_at_least)
    if problems:
        for pr in problems:
            print("%s: %s" % (PROG, pr), file=sys.stderr)
        return 1
    print("%s: %s" % (PROG, line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
