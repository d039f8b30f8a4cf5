"""The combined table of a sweep's records: the options that vary, then the figures, as CSV and
Markdown."""

import csv
import io

__all__ = ["FIGURES", "rows", "to_csv", "to_markdown"]

#: ``(column, record field, format)`` of the figures every table shows (a field a record lacks,
#: e.g. cycles of a golden run, is left empty).
FIGURES = (
    ("match", "match", "{}"),
    ("graph", "graph", "{}"),
    ("passes", "passes", "{:,}"),
    ("cycles", "cycles", "{:,}"),
    ("compute cycles", "compute_cycles", "{:,}"),
    ("utilization", "utilization", "{:.2%}"),
    ("dense-equivalent utilization", "dense_utilization", "{:.2%}"),
    ("utilization end to end", "utilization_end_to_end", "{:.2%}"),
    ("external bytes", "external_bytes", "{:,}"),
    ("minimum external bytes", "min_external_bytes", "{:,}"),
    ("peak bandwidth (B/cycle)", "peak_bandwidth", "{:.2f}"),
)


def rows(records):
    """Return ``(header, rows)``: the options that differ between ``records`` (all of them for
    one record), the figures of :data:`FIGURES`, and the wall time of each point's run."""
    options = sorted({k for r in records for k in r["point"]})
    varied = [k for k in options
              if len({repr(r["point"].get(k)) for r in records}) > 1] or options
    header = varied + [c for c, _, _ in FIGURES] + ["wall s"]
    out = []
    for r in records:
        row = [r["point"].get(k, "") for k in varied]
        for _, field, fmt in FIGURES:
            v = r["result"].get(field)
            row.append("" if v is None else fmt.format(v))
        row.append(f"{r['wall']['point_s']:.1f}")
        out.append([str(v) for v in row])
    return header, out


def to_csv(records):
    """Return the table as CSV text (raw figures: no thousands separators or percent)."""
    options = sorted({k for r in records for k in r["point"]})
    fields = [f for _, f, _ in FIGURES]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(options + fields + ["point_s", "key"])
    for r in records:
        w.writerow([r["point"].get(k, "") for k in options]
                   + [r["result"].get(f, "") for f in fields]
                   + [round(r["wall"]["point_s"], 3), r["key"]])
    return buf.getvalue()


def to_markdown(records):
    """Return the table as a Markdown table."""
    header, body = rows(records)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"
