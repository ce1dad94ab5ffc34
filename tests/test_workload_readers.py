"""Each trace format read from small hand-written files: values, rebasing, sniffing, options."""
import warnings

import pytest

from simulator.workload import READERS, TraceError, TraceWarning, load_trace, sniff_format

BURST_HDR = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURST_SESSION_HDR = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                     "Total tokens,Log Type\n")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_burstgpt_six_columns_rebased_failed_kept(tmp_path):
    p = write(tmp_path, "b.csv", BURST_HDR + "5,ChatGPT,472,18,490,Conversation log\n"
              "45,GPT-4,1087,0,1087,Conversation log\n"
              "45,ChatGPT,0,0,0,API log\n"
              "118,ChatGPT,417,276,693,Conversation log\n")
    w = load_trace(p)
    df = w.requests
    assert df["arrival_s"].tolist() == [0.0, 40.0, 40.0, 113.0]  # rebased to the first row
    assert df["input_tokens"].tolist() == [472, 1087, 1, 417]  # 0-token failure -> 1-token prompt
    assert df["output_tokens"].tolist() == [18, 0, 0, 276]
    assert df["request_id"].tolist() == [0, 1, 2, 3]  # data row in the file
    s = w.summary()
    assert s["prefill_only_requests"] == 2 and s["dropped_failed_requests"] == 0
    assert any("2 failed" in n and "prefill-only" in n for n in w.notes)


def test_burstgpt_drop_failed_counts_them(tmp_path):
    p = write(tmp_path, "b.csv", BURST_HDR + "5,ChatGPT,472,18,490,x\n6,GPT-4,10,0,10,x\n"
              "7,ChatGPT,0,0,0,x\n9,ChatGPT,3,4,7,x\n")
    w = load_trace(p, drop_failed=True)
    assert len(w) == 2 and w.requests["output_tokens"].tolist() == [18, 4]
    assert w.summary()["dropped_failed_requests"] == 2
    assert w.requests["request_id"].tolist() == [0, 3]


def test_burstgpt_session_layout_float_timestamps(tmp_path):
    p = write(tmp_path, "s.csv", BURST_SESSION_HDR
              + "1234.5,77,0.5,ChatGPT,10,20,30,Conversation log\n"
              + "1236.25,78,1.5,GPT-4,11,21,32,Conversation log\n")
    w = load_trace(p)
    assert w.requests["arrival_s"].tolist() == [0.0, 1.75]
    assert w.requests["session_id"].tolist() == ["77", "78"]
    assert w.summary()["sessions"] == 2


def test_burstgpt_model_filter_case_insensitive(tmp_path):
    p = write(tmp_path, "b.csv", BURST_HDR + "1,ChatGPT,1,1,2,x\n2,GPT-4,2,2,4,x\n3,GPT-4,3,3,6,x\n")
    w = load_trace(p, burstgpt_model="gpt-4")
    assert w.requests["input_tokens"].tolist() == [2, 3]
    assert w.requests["arrival_s"].tolist() == [0.0, 1.0]
    with pytest.raises(TraceError, match="ChatGPT or GPT-4"):
        load_trace(p, burstgpt_model="llama")


def test_azure_2023_seven_fractional_digits(tmp_path):
    p = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
              "2023-11-16 18:16:46.6805901,2,7\n")
    w = load_trace(p)
    t = w.requests["arrival_s"].to_numpy()
    assert t[0] == 0.0
    assert t[1] == pytest.approx(4.314579, abs=1e-9)  # 50.9951690 - 46.6805900
    assert t[2] == pytest.approx(60.0000001, abs=1e-9)  # the 7th digit (100 ns) is kept
    assert w.requests["input_tokens"].tolist() == [374, 396, 2]


def test_azure_2024_utc_offset(tmp_path):
    p = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2024-05-10 00:00:00.009930+00:00,10,1\n2024-05-10 00:00:01+00:00,20,2\n"
              "2024-05-10 02:00:01.5+02:00,30,3\n")  # same instant as 00:00:01.5 UTC
    w = load_trace(p)
    assert w.requests["arrival_s"].tolist() == pytest.approx([0.0, 0.99007, 1.49007])


def test_mooncake_ms_ties_and_hash_ids(tmp_path):
    p = write(tmp_path, "m.jsonl",
              '{"timestamp": 3000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
              '{"timestamp": 3000, "input_length": 700, "output_length": 0, "hash_ids": [0, 2]}\n'
              '\n{"timestamp": 6500, "input_length": 10, "output_length": 3}\n')
    w = load_trace(p)
    df = w.requests
    assert df["arrival_s"].tolist() == [0.0, 0.0, 3.5]
    assert df["input_tokens"].tolist() == [600, 700, 10]  # equal timestamps keep file order
    assert df["prefix_blocks"].tolist() == [(0, 1), (0, 2), ()]
    assert w.summary()["prefix_blocks_unique"] == 3


def test_canonical_optional_columns(tmp_path):
    p = write(tmp_path, "c.csv", "arrival_s,input_tokens,output_tokens,priority,request_id,"
              "session_id,prefix_blocks\n0.0,10,1,2,req-a,s1,1 2 3\n0.5,20,0,0,req-b,,\n")
    df = load_trace(p).requests
    assert df["request_id"].tolist() == ["req-a", "req-b"]
    assert df["priority"].tolist() == [2, 0]
    assert df["session_id"].isna().tolist() == [False, True]
    assert df["prefix_blocks"].tolist() == [(1, 2, 3), ()]


def test_canonical_minimal_defaults(tmp_path):
    p = write(tmp_path, "c.csv", "arrival_s,input_tokens,output_tokens\n10,5,5\n12.5,6,0\n")
    df = load_trace(p).requests
    assert df["arrival_s"].tolist() == [0.0, 2.5]
    assert df["priority"].tolist() == [0, 0] and df["request_id"].tolist() == [0, 1]


def test_canonical_unknown_column_warns(tmp_path):
    p = write(tmp_path, "c.csv", "arrival_s,input_tokens,output_tokens,priorty\n0,5,5,1\n")
    with pytest.warns(TraceWarning, match="priorty"):
        w = load_trace(p)
    assert w.requests["priority"].tolist() == [0]


def test_backwards_timestamps_sorted_with_warning(tmp_path):
    p = write(tmp_path, "c.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n5,2,2\n3,3,3\n")
    with pytest.warns(TraceWarning, match="line 4"):
        w = load_trace(p)
    assert w.requests["input_tokens"].tolist() == [1, 3, 2]
    assert w.requests["request_id"].tolist() == [0, 2, 1]


def test_sharegpt_table_is_a_batch(tmp_path):
    p = write(tmp_path, "s.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
              "74,918,992,0.08\n290,905,1195,0.32\n")
    w = load_trace(p)
    assert w.requests["arrival_s"].tolist() == [0.0, 0.0]
    assert w.requests["input_tokens"].tolist() == [74, 290]


@pytest.mark.parametrize("fmt,name,text", [
    ("burstgpt", "x.csv", BURST_HDR + "1,ChatGPT,1,1,2,x\n"),
    ("burstgpt", "x.txt", BURST_SESSION_HDR + "1,1,1,ChatGPT,1,1,2,x\n"),
    ("azure", "x.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n"),
    ("canonical", "x.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n"),
    ("sharegpt", "x.csv", "num_prefill_tokens,num_decode_tokens\n1,1\n"),
    ("mooncake", "x.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'),
    ("mooncake", "x.csv", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'),
])
def test_sniffing(tmp_path, fmt, name, text):
    p = write(tmp_path, name, text)
    assert sniff_format(p) == fmt
    assert len(load_trace(p)) == 1


def test_forced_format(tmp_path):
    p = write(tmp_path, "x.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n")
    assert len(load_trace(p, fmt="canonical")) == 1
    with pytest.raises(TraceError, match="missing column 'Timestamp'"):
        load_trace(p, fmt="burstgpt")
    assert set(READERS) == {"burstgpt", "azure", "mooncake", "canonical", "sharegpt"}


def test_bare_names_resolve_to_bundled_traces(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no such file here, so the bundled copy is used
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bundled samples load cleanly
        b = load_trace("burstgpt.csv")
        o = load_trace("bursty_onoff")
    assert b.source.endswith("traces/burstgpt.csv") and 1000 <= len(b) <= 2000
    assert o.source.endswith("traces/bursty_onoff.csv") and 500 <= len(o) <= 5000
    assert sorted(set(o.requests["priority"])) == [0, 1]
    write(tmp_path, "burstgpt.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n")
    assert len(load_trace("burstgpt.csv")) == 1  # a local file wins over the bundled one
