#!/usr/bin/env python3
"""Summarise kunit.py's JSON for one guest run.

Usage: ktap-summary.py RESULTS.json EXPECTED_SUITES
Prints one line per test case and, last, "pass=N fail=M"; a suite in the
comma-separated EXPECTED_SUITES list that did not run counts as one failure.
"""
import json
import sys


def walk(node, path, out):
    for case in node.get("test_cases", []):
        out.append((path + [case["name"]], case["status"]))
    for sub in node.get("sub_groups", []):
        walk(sub, path + [sub["name"]], out)


def suites(node, out):
    for sub in node.get("sub_groups", []):
        out.add(sub["name"])
        suites(sub, out)


def main():
    data = json.load(open(sys.argv[1]))
    expected = [s for s in sys.argv[2].split(",") if s]
    cases = []
    walk(data, [], cases)
    seen = set()
    suites(data, seen)
    passed = failed = 0
    for path, status in cases:
        name = ".".join(path)
        if status in ("PASS", "SKIP"):
            passed += status == "PASS"
            print(f"  {status.lower():4} {name}")
        else:
            failed += 1
            print(f"  FAIL {name} ({status})")
    for s in expected:
        if s not in seen:
            failed += 1
            print(f"  FAIL suite {s} did not run")
    print(f"pass={passed} fail={failed}")


main()
