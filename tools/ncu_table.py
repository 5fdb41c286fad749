#!/usr/bin/env python3
"""Table for tools/ncu-gemv.sh: Nsight Compute counters of one GEMV launch per mapping and shape beside the sector
model's prediction, plus a few lines of interpretation computed from the numbers.

Inputs: `ncu --import R --csv --page raw --print-units base` output; the manifest of `bench profile-target`
(id,mapping,N,K,matrix_bytes,alloc_bytes,ld; id = grid size of the marker kernel launched before each GEMV); JSON
lines of `gemv-sectors --json`. Standard library only.
"""
import argparse
import csv
import json
import re
import sys

SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
DRAM = "dram__bytes_read.sum"
TIME = "gpu__time_duration.sum"
GRID = "launch__grid_size"
L2_FROM_L1 = "lts__t_sectors_srcunit_tex_op_read.sum"
MARKER = "gemv_profile_marker"

# x loads each kernel issues per weight load instruction, and the sectors each touches (read off kernels/gemv/gemv_*.cu):
# warp-like: two float4 loads of x per 16-byte weight chunk, lanes 32 B apart -> 32 sectors each;
# thread, thread-splitk, colmajor: one x[k] per weight load, the same address in every lane -> 1 sector.
# cuBLAS's loads are not public: no x model.
X_LOADS = {"warp": (2, 32), "warp-few": (2, 32),
           "thread": (1, 1), "thread-splitk": (1, 1), "colmajor": (1, 1)}

UNIT_SCALE = {"": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
              "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,  # time -> microseconds
              "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6,
              "sector": 1.0, "request": 1.0, "Ksector": 1e3, "Msector": 1e6, "Krequest": 1e3, "Mrequest": 1e6}


def number(text, unit):
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text) * UNIT_SCALE.get(unit, 1.0)
    except ValueError:
        return None


def short_name(kernel):
    """'void llm::(anonymous namespace)::gemv_warp_per_row_bf16<true>(const unsigned short *, ...)' -> base name."""
    name = kernel.replace("(anonymous namespace)::", "")
    name = re.sub(r"^(void|static)\s+", "", name.strip())
    name = re.split(r"[(<]", name, maxsplit=1)[0]
    return name.split("::")[-1].strip() or kernel


def read_ncu_csv(path):
    """Kernel rows in launch order: dicts with name, grid, and the metrics (bytes, sectors, requests, us)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "ID" in r), None)
    if header_at is None:
        sys.exit(f"ncu_table: no header row with 'ID' and 'Kernel Name' in {path} (is it --page raw --csv?)")
    header = rows[header_at]
    units = [""] * len(header)
    body = rows[header_at + 1:]
    if body and not body[0][header.index("ID")].strip().isdigit():  # the units row
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    col = {name: i for i, name in enumerate(header)}
    kernels = []
    for r in body:
        if len(r) < len(header) or not r[col["ID"]].strip().isdigit():
            continue
        k = {"id": int(r[col["ID"]]), "name": short_name(r[col["Kernel Name"]])}
        for metric in (SECTORS, REQUESTS, DRAM, TIME, GRID, L2_FROM_L1):
            k[metric] = number(r[col[metric]], units[col[metric]]) if metric in col else None
        if k[GRID] is None and "Grid Size" in col:  # "(7, 1, 1)"
            dims = [int(d) for d in re.findall(r"\d+", r[col["Grid Size"]])]
            k[GRID] = float(dims[0] * dims[1] * dims[2]) if len(dims) == 3 else None
        kernels.append(k)
    kernels.sort(key=lambda k: k["id"])
    return kernels


def group_by_marker(kernels):
    """{marker id: [kernels launched after that marker, before the next one]}."""
    groups, current = {}, None
    for k in kernels:
        if MARKER in k["name"]:
            current = int(k[GRID]) if k[GRID] is not None else None
            if current is not None:
                groups[current] = []
        elif current is not None:
            groups[current].append(k)
    return groups


def read_manifest(path):
    with open(path, newline="") as f:
        return [{"id": int(r["id"]), "mapping": r["mapping"], "N": int(r["N"]), "K": int(r["K"]),
                 "matrix_bytes": int(r["matrix_bytes"])} for r in csv.DictReader(f)]


def read_sectors(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                p = json.loads(line)
                out[(p["mapping"], p["N"], p["K"])] = p
    return out


def predicted_with_x(mapping, pred):
    """Sectors per request over the weight loads plus the x loads the kernel issues beside them."""
    if pred is None or mapping not in X_LOADS:
        return None
    n_x, sectors_x = X_LOADS[mapping]
    req = pred["requests_total"]
    return (pred["sectors_total"] + n_x * sectors_x * req) / (req * (1 + n_x))


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:,.{digits}f}"


def build_rows(manifest, groups, sectors):
    rows = []
    for m in manifest:
        ks = groups.get(m["id"], [])
        row = dict(m)
        row["pred"] = sectors.get((m["mapping"], m["N"], m["K"]))
        row["pred_w"] = row["pred"]["sectors_per_request"] if row["pred"] else None
        row["pred_wx"] = predicted_with_x(m["mapping"], row["pred"])
        if not ks:
            row["main"] = None
            row["note"] = "no kernel profiled after marker %d" % m["id"]
            rows.append(row)
            continue
        main = max(ks, key=lambda k: (k[DRAM] or 0.0, k[TIME] or 0.0))  # the kernel streaming the weights
        aux = [k for k in ks if k is not main]
        row["main"] = main
        row["sectors_per_request"] = (main[SECTORS] / main[REQUESTS]) if main[SECTORS] and main[REQUESTS] else None
        row["dram"] = main[DRAM]
        row["l2_from_l1"] = main[L2_FROM_L1] * 32 if main[L2_FROM_L1] is not None else None
        row["us"] = main[TIME]
        row["us_total"] = sum(k[TIME] or 0.0 for k in ks)
        notes = [main["name"]]
        if aux:
            notes.append("+ " + ", ".join("%s %s us" % (k["name"], fmt(k[TIME], 1)) for k in aux))
        if m["mapping"] not in X_LOADS:
            notes.append("x loads not modelled")
        row["note"] = "; ".join(notes)
        rows.append(row)
    return rows


def markdown_table(rows, have_l2):
    head = ["mapping", "shape", "sectors/request measured", "predicted (W + x)", "predicted (W only)",
            "DRAM MB measured", "matrix MB", "DRAM/ideal"]
    if have_l2:
        head.append("L2->L1 MB")
    head += ["time us", "note"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["--:"] * (len(head) - 3) + ["---"]) + "|"]
    for r in rows:
        mb = r["matrix_bytes"] / 1e6
        dram = r.get("dram")
        cells = [r["mapping"], "%d x %d" % (r["N"], r["K"]), fmt(r.get("sectors_per_request")), fmt(r["pred_wx"]),
                 fmt(r["pred_w"]), fmt(dram / 1e6 if dram is not None else None, 1), fmt(mb, 1),
                 fmt(dram / r["matrix_bytes"] if dram is not None else None)]
        if have_l2:
            l2 = r.get("l2_from_l1")
            cells.append(fmt(l2 / 1e6 if l2 is not None else None, 1))
        cells += [fmt(r.get("us"), 1), r["note"]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def interpret_mapping(mapping, rs, have_l2):
    """One line per mapping: sectors vs the model, DRAM vs the matrix, and (with L2 counters) who kept the sectors."""
    rs = [r for r in rs if r.get("main") is not None]
    if not rs:
        return f"- {mapping}: nothing profiled."
    parts = []
    spr = [r["sectors_per_request"] for r in rs if r.get("sectors_per_request") is not None]
    pred = [r["pred_wx"] for r in rs if r["pred_wx"] is not None]
    if spr:
        lo, hi = min(spr), max(spr)
        text = f"{fmt(lo)}" if abs(hi - lo) < 0.05 else f"{fmt(lo)}..{fmt(hi)}"
        if pred and len(pred) == len(spr):
            worst = max(abs(r["sectors_per_request"] - r["pred_wx"]) / r["pred_wx"] for r in rs
                        if r.get("sectors_per_request") is not None and r["pred_wx"])
            verdict = "as predicted" if worst <= 0.10 else f"off the model by up to {worst * 100:.0f}%"
            w_only = rs[0]["pred_w"]
            parts.append(f"{text} sectors/request, {verdict} (weights alone: {fmt(w_only)}; x loads counted in)")
        else:
            parts.append(f"{text} sectors/request (no model for this kernel's x loads)")
    ratios = [r["dram"] / r["matrix_bytes"] for r in rs if r.get("dram") is not None]
    if ratios:
        lo, hi = min(ratios), max(ratios)
        span = f"{lo:.2f}" if hi - lo < 0.02 else f"{lo:.2f}..{hi:.2f}"
        worst = max(rs, key=lambda r: (r.get("dram") or 0) / r["matrix_bytes"])
        if hi <= 1.15:
            parts.append(f"DRAM read = {span} x the matrix: every fetched sector was used before it left the caches")
        else:
            parts.append(f"DRAM read = {span} x the matrix (worst {worst['N']} x {worst['K']}): sectors were "
                         f"evicted before all their bytes were used")
    # Weight sector bytes the lanes ask L1 for, per the model (x loads excluded): > 2 x the matrix means each weight
    # sector is asked for by several requests, so someone (L1 or L2) must keep it between them.
    requested = [r["pred"]["dram_bytes_no_reuse"] / r["matrix_bytes"] for r in rs if r["pred"]]
    if have_l2:
        l2 = [r["l2_from_l1"] / r["matrix_bytes"] for r in rs if r.get("l2_from_l1") is not None]
        if l2 and requested:
            l2_hi, req_hi = max(l2), max(requested)
            if req_hi > 2.0 and l2_hi <= 1.3:
                parts.append(f"L1 held its sectors until the lanes came back (the weight loads ask for {req_hi:.1f} x "
                             f"the matrix in sectors, L2 sent L1 only {l2_hi:.2f} x)")
            elif req_hi > 2.0:
                parts.append(f"L1 did not hold them: L2 sent L1 up to {l2_hi:.1f} x the matrix for {req_hi:.1f} x "
                             f"asked; L2 absorbed the re-fetches" if hi <= 1.15 else
                             f"L1 did not hold them: L2 sent L1 up to {l2_hi:.1f} x the matrix")
    gbps = [(r["matrix_bytes"] / (r["us"] * 1e-6) / 1e9, r) for r in rs if r.get("us")]
    if gbps:
        best = max(gbps, key=lambda t: t[0])
        worst = min(gbps, key=lambda t: t[0])
        parts.append(f"weight GB/s under the profiler {worst[0]:,.0f} ({worst[1]['N']} x {worst[1]['K']}) .. "
                     f"{best[0]:,.0f} ({best[1]['N']} x {best[1]['K']})")
    return f"- {mapping}: " + "; ".join(parts) + "."


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncu-csv", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--sectors", required=True, help="JSON lines from gemv-sectors --json")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()

    kernels = read_ncu_csv(a.ncu_csv)
    groups = group_by_marker(kernels)
    manifest = read_manifest(a.manifest)
    sectors = read_sectors(a.sectors)
    rows = build_rows(manifest, groups, sectors)
    have_l2 = any(r.get("l2_from_l1") is not None for r in rows)

    print("One cold launch per mapping and shape (ncu --cache-control all --clock-control none); sectors and "
          "requests are global loads (weights and x); 'predicted (W + x)' adds the x loads each kernel issues to "
          "the sector model's weight loads; DRAM/ideal = DRAM bytes read / matrix bytes; time = the "
          "weight-streaming kernel alone (other kernels of the launch in the note).\n")
    print(markdown_table(rows, have_l2))
    print()
    for mapping in dict.fromkeys(r["mapping"] for r in rows):
        print(interpret_mapping(mapping, [r for r in rows if r["mapping"] == mapping], have_l2))
    missing = [r for r in rows if r.get("main") is None]
    if missing:
        print(f"\n{len(missing)} launch group(s) had no profiled kernel: check ncu.log.")

    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k not in ("main", "pred")} for r in rows], f, indent=1)
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
