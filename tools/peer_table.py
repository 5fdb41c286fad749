#!/usr/bin/env python3
"""The peer benchmark's table (scripts/peer-bench.sh): llama.cpp's llama-bench beside our llama-ab, per GGUF file.

    peer_table.py gguf FILE.gguf     the file's tensor types (projections counted as the engine counts them) and the
                                     engine's default GEMV mapping for them, as JSON on stdout
    peer_table.py table DIR...       one markdown table from DIR/llama-bench.json (llama-bench -o json),
                                     DIR/ours.json (llama-ab --json) and DIR/gguf.json (the command above, optional)

Standard library only: it runs on the GPU machine, which has no package installs.
"""
import json
import os
import struct
import sys

# ggml_type ids (ggml/include/ggml.h) -> names, as llama.cpp and our engine print them.
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K",
    12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
    29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0", 42: "Q2_0",
}
FLOAT_TYPES = {"F32", "F16", "BF16"}
# The engine's default mapping (engine/gemv_choice.cpp default_gemv_name): warp-r2 (kGemvDefaultMapping) when no
# projection or head is kept quantized; otherwise warp-dp4a where every one is quantized in a type it runs and they hold
# at least 1 GiB (kDp4aDefaultBytes: decode streams that much per token), else warp.
DEFAULT_QUANT_MAPPING = "warp"
DEFAULT_DP4A_MAPPING = "warp-dp4a"
DEFAULT_BF16_MAPPING = "warp-r2"
DP4A_DEFAULT_BYTES = 1 << 30
# Bytes per block and weights per block of the quantized types warp-dp4a runs (ggml's block sizes).
DP4A_BLOCKS = {"Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
               "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256)}
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

# GGUF metadata value types (ggml/include/gguf.h gguf_type): struct format of the scalar ones.
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGUF_STRING, GGUF_ARRAY = 8, 9


class PeerError(Exception):
    pass


class Reader:
    def __init__(self, f, path):
        self.f, self.path = f, path

    def take(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise PeerError(f"{self.path}: truncated GGUF header")
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.unpack("<Q")
        if n > 1 << 30:
            raise PeerError(f"{self.path}: GGUF string of {n} bytes")
        return self.take(n).decode("utf-8", errors="replace")

    def skip_value(self, vtype):
        if vtype in GGUF_SCALARS:
            self.take(struct.calcsize(GGUF_SCALARS[vtype]))
        elif vtype == GGUF_STRING:
            self.f.seek(self.unpack("<Q"), os.SEEK_CUR)
        elif vtype == GGUF_ARRAY:
            etype, n = self.unpack("<I"), self.unpack("<Q")
            if etype in GGUF_SCALARS:
                self.f.seek(n * struct.calcsize(GGUF_SCALARS[etype]), os.SEEK_CUR)
            else:
                for _ in range(n):
                    self.skip_value(etype)
        else:
            raise PeerError(f"{self.path}: unknown GGUF metadata type {vtype}")

    def value(self, vtype):
        if vtype in GGUF_SCALARS:
            return self.unpack(GGUF_SCALARS[vtype])
        if vtype == GGUF_STRING:
            return self.string()
        self.skip_value(vtype)
        return None


def gguf_info(path):
    """Tensor types of a GGUF file, read from its header only."""
    with open(path, "rb") as f:
        r = Reader(f, path)
        if r.take(4) != b"GGUF":
            raise PeerError(f"{path}: not a GGUF file (no GGUF magic)")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise PeerError(f"{path}: GGUF version {version} (2 or 3 expected)")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        meta = {}
        for _ in range(n_kv):
            key, vtype = r.string(), r.unpack("<I")
            v = r.value(vtype)
            if key in ("general.architecture", "general.name", "general.file_type"):
                meta[key] = v
        tensors, sizes = {}, {}
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.unpack("<I")
            if n_dims > 8:
                raise PeerError(f"{path}: tensor {name} has {n_dims} dimensions")
            elems = 1
            for _ in range(n_dims):
                elems *= r.unpack("<Q")
            t = r.unpack("<I")
            r.unpack("<Q")  # offset
            tensors[name] = GGML_TYPES.get(t, f"type{t}")
            sizes[name] = elems
    # The projections decode runs, and the head (the embedding when there is no output.weight: tied).
    proj = [n for n in tensors if n.startswith("blk.") and n.split(".")[2:3] and n.split(".")[2] in PROJECTIONS
            and n.endswith(".weight")]
    proj.append("output.weight" if "output.weight" in tensors else "token_embd.weight")
    def count(names):
        c = {}
        for n in names:
            if n in tensors:
                c[tensors[n]] = c.get(tensors[n], 0) + 1
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
    proj_types = count(proj)
    quant = any(t not in FLOAT_TYPES for t in proj_types)
    dp4a = all(tensors.get(n) in DP4A_BLOCKS for n in proj if n in tensors)
    quant_bytes = sum(sizes[n] // DP4A_BLOCKS[tensors[n]][1] * DP4A_BLOCKS[tensors[n]][0]
                      for n in proj if tensors.get(n) in DP4A_BLOCKS)
    mapping = DEFAULT_BF16_MAPPING
    if quant:
        mapping = DEFAULT_DP4A_MAPPING if dp4a and quant_bytes >= DP4A_DEFAULT_BYTES else DEFAULT_QUANT_MAPPING
    return {
        "file": os.path.basename(path),
        "architecture": meta.get("general.architecture"),
        "name": meta.get("general.name"),
        "tensors": len(tensors),
        "projection_types": proj_types,
        "all_types": count(tensors),
        "default_mapping": mapping,
    }


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise PeerError(f"{path} not found")
    except json.JSONDecodeError as e:
        raise PeerError(f"{path}: not JSON ({e})")


def tg_entry(entries, path):
    """llama-bench's text-generation test (n_prompt 0, n_gen > 0) out of its JSON array."""
    if not isinstance(entries, list):
        raise PeerError(f"{path}: expected llama-bench's JSON array")
    tg = [e for e in entries if e.get("n_prompt") == 0 and e.get("n_gen", 0) > 0]
    if len(tg) != 1:
        raise PeerError(f"{path}: {len(tg)} text-generation tests (n_prompt 0, n_gen > 0), expected 1")
    return tg[0]


def fmt_types(types):
    return ", ".join(f"{t} x {n}" for t, n in types.items()) if types else "n/a"


def fmt_bytes(b):
    return f"{b / 1e9:.2f} GB" if b >= 1e8 else f"{b / 1e6:.1f} MB"


def one_of(values):
    vals = sorted({str(v) for v in values if v not in (None, "")})
    return " / ".join(vals) if vals else "n/a"


def table(dirs):
    rows, peers, ours_all = [], [], []
    for d in dirs:
        peer = tg_entry(load_json(os.path.join(d, "llama-bench.json")), os.path.join(d, "llama-bench.json"))
        ours = load_json(os.path.join(d, "ours.json"))
        gpath = os.path.join(d, "gguf.json")
        info = load_json(gpath) if os.path.exists(gpath) else {}
        try:
            data, summ = ours["data"], ours["summary"]
            bpt = float(data["gemv_bytes_per_token"])
            roof = float(summ["roofline_gbps"]["median"])
            ceiling = float(summ["ceiling_tps"])
            maps = [(m["mapping"], float(m["tps"]["median"]), float(m["tps"]["sd"])) for m in summ["mappings"]]
        except (KeyError, TypeError, ValueError) as e:
            raise PeerError(f"{os.path.join(d, 'ours.json')}: not llama-ab's JSON (missing {e})")
        if not maps:
            raise PeerError(f"{os.path.join(d, 'ours.json')}: no mappings")
        peer_tps = float(peer["avg_ts"])
        if peer_tps <= 0:
            raise PeerError(f"{os.path.join(d, 'llama-bench.json')}: avg_ts {peer_tps}")
        peers.append(peer)
        ours_all.append(data)
        file_name = info.get("file") or os.path.basename(peer.get("model_filename", "")) or os.path.basename(d)
        for name, tps, sd in maps:
            rows.append([
                file_name, peer.get("model_type", "n/a"), fmt_types(info.get("projection_types")), fmt_bytes(bpt),
                f"{peer_tps:.1f} ± {float(peer.get('stddev_ts', 0)):.1f}", name, f"{tps:.1f} ± {sd:.1f}",
                f"{tps / peer_tps:.2f}x", f"{roof:.0f}", f"{ceiling:.1f}",
            ])
    p0 = peers[0]
    lines = [
        "## Peer benchmark: llama.cpp (llama-bench) and this engine (llama-ab) on the same GGUF files",
        "",
        f"- llama.cpp: build {one_of(p['build_commit'] for p in peers)} (llama-cpp-python 0.3.36 sdist), "
        f"backend {one_of(p.get('backends') for p in peers)}, GPU {one_of(p.get('gpu_info') for p in peers)}; "
        f"`llama-bench -ngl {p0.get('n_gpu_layers')} -fa {p0.get('flash_attn')} -p 0 -n {p0.get('n_gen')}`: "
        f"tg{p0.get('n_gen')}, {len(p0.get('samples_ts', [])) or 'n/a'} repetitions, mean ± sd",
        f"- ours: llama-ab on {one_of(o.get('device') for o in ours_all)}: a "
        f"{one_of(o.get('prompt_tokens') for o in ours_all)}-token prompt, then "
        f"{one_of(o.get('n_decode') for o in ours_all)} greedy decode steps, "
        f"{one_of(o.get('repeats') for o in ours_all)} repeats, median ± sd; bytes/token = weight bytes one decode "
        "step reads through the GEMVs; roofline = streaming-read GB/s measured in the same run; "
        "ceiling = roofline / bytes per token",
        "",
        "| file | format (llama.cpp) | projection types | bytes/token (ours) | llama.cpp tg t/s | ours mapping "
        "| ours t/s | ours / llama.cpp | roofline GB/s | ceiling t/s |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    cmd, args = argv[1], argv[2:]
    try:
        if cmd == "gguf":
            if len(args) != 1:
                raise PeerError("gguf takes one file")
            print(json.dumps(gguf_info(args[0]), indent=2))
        elif cmd == "table":
            if not args:
                raise PeerError("table needs at least one result directory")
            sys.stdout.write(table(args))
        else:
            raise PeerError(f"unknown command '{cmd}' (gguf, table)")
    except (PeerError, OSError) as e:
        print(f"peer_table: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
