#!/usr/bin/env python3
"""Compare `nodeproof gpu -o json` with `nvidia-smi -q -x`, field by field.

Usage: gpu-compare.py NODEPROOF_JSON NVIDIA_SMI_XML. Prints one line per
field and GPU: `MATCH`, `DIFF` or `ONLY` (one side lacks it). Exit 0 when
nothing differs, 1 otherwise. nvidia-smi's XML layout varies with the
driver branch, so each field tries the element names the branches use.
"""
import json
import re
import sys
import xml.etree.ElementTree as ET


def text(node, *paths):
    for p in paths:
        e = node.find(p)
        if e is not None and e.text and e.text.strip() not in ("N/A", "Not Supported"):
            return e.text.strip()
    return None


def bus(b):
    # nvidia-smi: 00000000:18:00.0; nodeproof: 0000:18:00.0
    m = re.match(r"^(?:[0-9a-fA-F]*?)([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", b or "")
    return "%s:%s:%s.%s" % tuple(x.lower() for x in m.groups()) if m else b


def number(s):
    m = re.search(r"[-+]?\d+(\.\d+)?", s or "")
    return float(m.group(0)) if m else None


def main(js, xml):
    report = json.load(open(js))["report"]
    snap = report.get("snapshot") or {}
    smi = ET.parse(xml).getroot()
    diffs = 0

    def line(field, gpu, ours, theirs, same=None):
        nonlocal diffs
        if ours is None or theirs is None:
            verdict = "ONLY"
        else:
            ok = same(ours, theirs) if same else str(ours) == str(theirs)
            verdict = "MATCH" if ok else "DIFF"
            diffs += verdict == "DIFF"
        print("%-28s %-14s %-8s nodeproof=%s nvidia-smi=%s" % (field, gpu, verdict, ours, theirs))

    system = snap.get("system") or {}
    line("driver_version", "-", system.get("driver_version"), text(smi, "driver_version"))
    line("cuda_version", "-", system.get("cuda_driver_version"), text(smi, "cuda_version"))
    line("gpu_count", "-", system.get("device_count"), text(smi, "attached_gpus"),
         lambda a, b: int(a) == int(b))
    by_bus = {bus(g.get("id")): g for g in smi.findall("gpu")}
    cuda = {d.get("uuid"): d for d in (snap.get("cuda") or {}).get("devices", [])}
    for g in snap.get("gpus", []):
        tag = "GPU %s" % g.get("index")
        x = by_bus.get(g.get("pci_bus_id"))
        if x is None:
            line("present", tag, g.get("pci_bus_id"), None)
            continue
        line("uuid", tag, g.get("uuid"), text(x, "uuid"))
        line("name", tag, g.get("name"), text(x, "product_name"))
        persistence = g.get("persistence_mode")
        line("persistence_mode", tag, None if persistence is None else ("Enabled" if persistence else "Disabled"),
             text(x, "persistence_mode"))
        line("ecc_uncorrected_volatile", tag, g.get("ecc_uncorrected_volatile"),
             text(x, "ecc_errors/volatile/dram_uncorrectable", "ecc_errors/volatile/double_bit/total"),
             lambda a, b: number(str(a)) == number(b))
        line("temperature_c", tag, g.get("temperature_c"), text(x, "temperature/gpu_temp"),
             lambda a, b: abs(float(a) - number(b)) <= 3)
        power = g.get("power_mw")
        line("power_w", tag, None if power is None else power / 1000.0,
             text(x, "gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
                  "power_readings/power_draw"),
             lambda a, b: abs(float(a) - number(b)) <= max(10.0, 0.15 * number(b)))
        rows = g.get("remapped_rows") or {}
        line("row_remap_pending", tag, None if not rows else ("Yes" if rows.get("pending") else "No"),
             text(x, "remapped_rows/remapped_row_pending"))
        fabric = g.get("fabric") or {}
        line("fabric_state", tag, fabric.get("state"), text(x, "fabric/state"),
             lambda a, b: a.replace("-", "") == b.replace(" ", "").lower())
        if g.get("uuid") in cuda:
            d = cuda[g["uuid"]]
            failure = d.get("failure")
            print("%-28s %-14s %-8s %s" % ("cuda_context_alloc", tag, "INFO",
                                           "ok" if not failure else "%s %s" % (failure["call"], failure["result"]["name"])))
    links = sum(len(g.get("nvlinks", [])) for g in snap.get("gpus", []))
    print("nvlinks reported by nodeproof: %d (see nvidia-smi-nvlink.txt)" % links)
    print("cuda state: %s" % json.dumps((snap.get("cuda") or {}).get("state")))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
