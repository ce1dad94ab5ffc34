"""Every bad input is one error line naming file, line and field; the CLI exits 2 without a traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.workload import TraceError, load_trace
from simulator.workload.cli import describe_main

BURST_HDR = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
CANON_HDR = "arrival_s,input_tokens,output_tokens,request_id\n"
AZURE_HDR = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
REPO = Path(__file__).resolve().parents[1]

# (case id, file name, content, load_trace keywords, expected line, expected field, message part)
CASES = [
    ("empty file", "e.csv", "", {}, 1, None, "empty file"),
    ("header only", "h.csv", CANON_HDR, {}, None, None, "no requests"),
    ("azure header only", "ah.csv", AZURE_HDR, {}, None, None, "no requests"),
    ("all rows filtered", "af.csv", BURST_HDR + "1,GPT-4,5,5,10,x\n", {"burstgpt_model": "ChatGPT"},
     None, None, "no requests"),
    ("unknown format", "u.csv", "a,b,c\n1,2,3\n", {}, 1, None, "unknown trace format"),
    ("missing column", "m.csv", "arrival_s,input_tokens\n0,1\n", {}, 1, "output_tokens",
     "expects columns arrival_s, input_tokens, output_tokens"),
    ("misspelled column", "s.csv", BURST_HDR.replace("Request tokens", "Request_tokens")
     + "1,ChatGPT,1,1,2,x\n", {}, 1, "Request tokens", "did you mean 'Request_tokens'"),
    ("non-numeric tokens", "n.csv", BURST_HDR + "1,ChatGPT,5,5,10,x\n2,ChatGPT,five,5,10,x\n",
     {}, 3, "Request tokens", "not a number: 'five'"),
    ("negative tokens", "g.csv", CANON_HDR + "0,5,1,a\n1,5,-3,b\n", {}, 3, "output_tokens",
     "negative: -3"),
    ("zero input tokens", "z.csv", CANON_HDR + "0,0,1,a\n", {}, 2, "input_tokens", ">= 1"),
    ("fractional tokens", "f.csv", CANON_HDR + "0,5.5,1,a\n", {}, 2, "input_tokens",
     "not a whole number"),
    ("NaN tokens", "nan.csv", CANON_HDR + "0,5,1,a\n1,NaN,1,b\n", {}, 3, "input_tokens",
     "not a number: 'NaN'"),
    ("empty field", "ef.csv", CANON_HDR + "0,5,1,a\n1,5,,b\n", {}, 3, "output_tokens",
     "missing value"),
    ("NaN timestamp", "nt.csv", BURST_HDR + "1,ChatGPT,5,5,10,x\n,ChatGPT,5,5,10,x\n", {}, 3,
     "Timestamp", "missing value"),
    ("infinite time", "inf.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\ninf,1,1\n", {}, 3,
     "arrival_s", "not finite"),
    ("backwards under strict", "b.csv", CANON_HDR + "0,5,1,a\n9,5,1,b\n4,5,1,c\n",
     {"strict": True}, 4, "arrival_s", "goes backwards"),
    ("duplicate ids", "d.csv", CANON_HDR + "0,5,1,a\n1,5,1,b\n2,5,1,a\n", {}, 4, "request_id",
     "first at line 2"),
    ("bad azure time", "a.csv", AZURE_HDR + "2023-11-16 18:15:46.6805900,5,1\nsoon,5,1\n", {}, 3,
     "TIMESTAMP", "not a timestamp"),
    ("bad json", "j.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"ti\n',
     {}, 2, None, "not valid JSON"),
    ("missing json key", "k.jsonl", '{"timestamp": 0, "input_len": 5, "output_length": 1}\n',
     {}, 1, "input_length", "did you mean 'input_len'"),
    ("bad hash_ids", "hi.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": "x"}\n', {}, 1, "hash_ids", "list of integers"),
    ("open quote", "q.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n1,\"2,3\n", {}, None,
     None, "malformed CSV"),
    ("bad model", "bm.csv", BURST_HDR + "1,ChatGPT,5,5,10,x\n", {"burstgpt_model": "Claude"},
     None, "--burstgpt-model", "ChatGPT or GPT-4"),
    ("binary file", "bin.csv", b"\xff\xfe\x00\x81binary", {}, 1, None, "not UTF-8 text"),
    ("latin-1 byte", "l1.csv", b"arrival_s,input_tokens,output_tokens\n0,1,1\n1,\xe9,1\n", {}, 3,
     None, "not UTF-8 text"),
    ("latin-1 json", "l1.jsonl", b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
     b'{"timestamp": 1, "input_length": "\xe9"}\n', {}, 2, None, "not UTF-8 text"),
    # (2026-12-03, a new user's QA: 1e20 was cast past int64 and reported as "negative: -9223372036854775808";
    # numpy reprs leaked into messages: "duplicate request_id np.int64(1)", "not a number: np.True_")
    ("tokens past int64", "big.csv", CANON_HDR + "0,5,1,a\n1,1e20,1,b\n", {}, 3, "input_tokens", "too large: 1e+20"),
    ("duplicate numeric ids", "dn.csv", "arrival_s,input_tokens,output_tokens,request_id\n0,5,1,7\n1,5,1,7\n", {}, 3,
     "request_id", "duplicate request_id 7 (first"),
    ("bool in json", "bj.jsonl", '{"timestamp": 0, "input_length": true, "output_length": 5}\n', {}, 1, "input_length",
     "not a number: True"),
    ("space in header", "sp.csv", "arrival_s, input_tokens,output_tokens\n0,1,1\n", {}, 1,
     "input_tokens", "did you mean ' input_tokens'"),
]


def _write(tmp_path, name, text):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error_names_file_line_field(tmp_path, case):
    _, name, text, kw, line, field, part = case
    p = _write(tmp_path, name, text)
    with pytest.raises(TraceError) as e:
        load_trace(p, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(str(p))
    assert part in msg
    assert e.value.line == line and e.value.field == field
    if line is not None:
        assert f": line {line}: " in msg
    if field is not None:
        assert f"field '{field}'" in msg


def test_missing_file_and_unknown_forced_format(tmp_path):
    with pytest.raises(TraceError, match="no such file.*bundled: .*burstgpt.csv"):
        load_trace(tmp_path / "nope.csv")
    p = _write(tmp_path, "x.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(TraceError, match="unknown trace format 'parquet'"):
        load_trace(p, fmt="parquet")
    with pytest.raises(TraceError, match="not a regular file"):
        load_trace(tmp_path)


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == {}], ids=lambda c: c[0])
def test_cli_one_line_exit_2(tmp_path, capsys, case):
    p = _write(tmp_path, case[1], case[2])
    assert describe_main([str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {p}")


@pytest.mark.parametrize("argv,part", [
    (["--strict"], "goes backwards"),
    (["--time-window", "abc"], "START:END"),
    (["--time-window", "100:200"], "selects no requests"),
    (["--rate-scale", "0"], "positive"),
    (["--sample", "-3"], "request count"),
    (["--sample", "10"], "cannot sample 10 of 3"),
    (["--max-context-clip", "no-such-model"], "unknown model"),
    (["--trace-format", "azure"], "missing column 'TIMESTAMP'"),
])
def test_cli_bad_flags(tmp_path, capsys, argv, part):
    p = _write(tmp_path, "c.csv", CANON_HDR + "0,5,1,a\n9,5,1,b\n4,5,1,c\n")
    assert describe_main([str(p), *argv]) == 2
    err = capsys.readouterr().err
    assert part in err and err.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("spec,part", [
    ("synthetic:zipf?n=3", "unknown generator 'zipf'"),
    ("synthetic:poisson?burstiness=2", "field 'burstiness'"),
    ("synthetic:gamma?rate=fast", "bad value 'fast'"),
    ("synthetic:poisson?n=10&duration_s=5", "not both"),
    ("synthetic:gamma?burstiness=-1", "positive"),
    ("synthetic:poisson?priority=0:1,1", "PRIORITY:WEIGHT"),
    ("synthetic:poisson?input=0", "input tokens must be >= 1"),
    ("synthetic:onoff?high=0", "burst rate"),
    ("synthetic:poisson?n=100&output=-3", "must be >= 0"),  # (was: "invalid literal for int() ... ''")
])
def test_bad_synthetic_specs(capsys, spec, part):
    assert describe_main([spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and part in err


def test_module_entry_point_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "simulator.workload", "describe",
                        str(tmp_path / "missing.csv")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr
