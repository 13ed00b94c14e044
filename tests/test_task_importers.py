"""Dialogue-act and timeline importers on small hand-made CSV fixtures."""

from __future__ import annotations

import pandas as pd
import pytest

from tasks.corpus.task_importers import (
    import_timeline_table,
    import_utterance_table,
    swda_clean,
    swda_damsl_tag,
)
from tasks.errors import InputError
from tasks.training.task_metrics import tags_to_segments

SWDA = """conversation_no,caller,utterance_index,subutterance_index,act_tag,text
4325,A,1,1,sd,I like cats /
4325,B,2,1,b,Uh-huh. /
4325,A,3,1,+,and dogs too /
4325,A,4,1,qy^d,you too? /
4325,B,5,1,"ny,sd",yes I do /
4326,A,1,1,qr,Is it raining /
4326,A,1,2,sv,it must be /
"""


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_damsl_tag_and_clean():
    assert swda_damsl_tag("qy^d") == "qy^d"
    assert swda_damsl_tag("sd^e") == "sd"
    assert swda_damsl_tag("qr") == "qy"
    assert swda_damsl_tag("ny, sd") == "ny"
    assert swda_damsl_tag("nn^e") == "ng"
    assert swda_damsl_tag("bc") == 'fo_o_fw_"_by_bc'
    assert swda_clean("{F uh, } I [ like, + like ] cats. <laughter> /") == "uh, I like, like cats."


def test_utterance_table_merges_continuations(tmp_path):
    corpus = import_utterance_table(write(tmp_path, "swda.csv", SWDA), tag_map=swda_damsl_tag,
                                    clean=swda_clean).corpus
    c1 = corpus[corpus["group_id"] == "4325"].sort_values("position")
    # the "+" row joins A's utterance 1: "I like cats and dogs too" is one 6-word sd segment
    assert c1["doc_id"].tolist() == ["4325-1-1", "4325-2-1", "4325-4-1", "4325-5-1"]
    assert c1["text"].tolist()[0] == "I like cats and dogs too"
    assert c1["seg_tags"].tolist()[0] == "I I I I I sd"
    assert c1["label"].tolist() == ["sd", "b", "qy^d", "ny"]
    assert c1["position"].tolist() == [0, 1, 2, 3]
    assert c1["author_id"].tolist() == ["4325:A", "4325:B", "4325:A", "4325:B"]
    c2 = corpus[corpus["group_id"] == "4326"].sort_values("position")
    assert c2["label"].tolist() == ["qy", "sv"]  # qr -> qy (condensed)
    assert corpus.groupby("group_id")["split"].nunique().max() == 1  # whole conversations per split
    for text, tags in zip(corpus["text"], corpus["seg_tags"], strict=True):
        assert len(text.split()) == len(tags.split())


def test_utterance_table_turns_hold_several_segments(tmp_path):
    corpus = import_utterance_table(write(tmp_path, "swda.csv", SWDA), tag_map=swda_damsl_tag,
                                    clean=swda_clean, turns=True).corpus
    c2 = corpus[corpus["group_id"] == "4326"]
    assert len(c2) == 1  # A's two utterances are one turn
    row = c2.iloc[0]
    assert row["text"] == "Is it raining it must be"
    assert row["seg_tags"] == "I I qy I I sv"
    assert [(s.start, s.end, s.label) for s in tags_to_segments(row["seg_tags"].split())] == [(0, 3, "qy"), (3, 6, "sv")]
    c1 = corpus[corpus["group_id"] == "4325"]
    assert len(c1) == 4  # A, B, A, B alternate: no two consecutive utterances of one caller


def test_utterance_table_without_merging_keeps_continuation_rows(tmp_path):
    corpus = import_utterance_table(write(tmp_path, "swda.csv", SWDA), merge_continuations=False).corpus
    assert (corpus["label"] == "+").sum() == 1
    assert len(corpus) == 7


def test_utterance_table_custom_mapping_and_errors(tmp_path):
    csv = "dlg,spk,idx,da,utt\nd1,x,1,greet,hello there\nd1,y,2,greet,hi\nd1,x,3,ask,how are you\n"
    path = write(tmp_path, "own.csv", csv)
    corpus = import_utterance_table(path, columns={"conversation": "dlg", "caller": "spk", "utterance": "idx",
                                                   "subutterance": None, "act": "da", "text": "utt"}).corpus
    assert corpus["doc_id"].tolist() == ["d1-1", "d1-2", "d1-3"]
    assert corpus["seg_tags"].tolist() == ["I greet", "greet", "I I ask"]
    with pytest.raises(InputError, match="column mapped to act is missing"):
        import_utterance_table(path, columns={"conversation": "dlg", "caller": "spk", "utterance": "idx",
                                              "subutterance": None, "text": "utt"})
    bad = write(tmp_path, "bad.csv", csv.replace("d1,y,2", "d1,y,two"))
    with pytest.raises(InputError, match="row 2"):
        import_utterance_table(bad, columns={"conversation": "dlg", "caller": "spk", "utterance": "idx",
                                             "subutterance": None, "act": "da", "text": "utt"})


TIMELINE = """user,tid,ts,post,moc
u1,t1,2020-01-03,feeling awful again,IS
u1,t1,2020-01-01,good day today,0
u1,t1,2020-01-02,still good,O
u1,t1,2020-01-04,,IE
u2,t2,2021-05-05,ok,IEP
u2,t2,2021-05-03,fine,ISB
"""


def test_timeline_table_orders_by_timestamp_and_maps_labels(tmp_path):
    result = import_timeline_table(write(tmp_path, "tl.csv", TIMELINE), timeline_col="tid", text_col="post",
                                   label_col="moc", user_col="user", timestamp_col="ts")
    corpus = result.corpus
    t1 = corpus[corpus["group_id"] == "t1"]
    assert t1["text"].tolist() == ["good day today", "still good", "feeling awful again"]
    assert t1["label"].tolist() == ["O", "O", "IS"]
    assert t1["position"].tolist() == [0, 1, 2]
    assert t1["doc_id"].tolist() == ["t1-0", "t1-1", "t1-2"]
    assert len(result.failures) == 1 and result.failures["doc_id"].iloc[0] == "t1-3"  # the empty post
    t2 = corpus[corpus["group_id"] == "t2"]
    assert t2["label"].tolist() == ["IS", "IE"]  # ISB on May 3rd, then IEP on May 5th
    assert set(corpus["author_id"]) == {"u1", "u2"}


def test_timeline_table_rejects_unknown_label(tmp_path):
    path = write(tmp_path, "tl.csv", "tid,post,moc\nt1,hello,O\nt1,bye,SWITCH\n")
    with pytest.raises(InputError, match="row 2"):
        import_timeline_table(path, timeline_col="tid", text_col="post", label_col="moc")
    ok = import_timeline_table(path, timeline_col="tid", text_col="post", label_col="moc",
                               label_map={"SWITCH": "IS"}).corpus
    assert ok["label"].tolist() == ["O", "IS"]
    assert isinstance(ok, pd.DataFrame) and ok["position"].tolist() == [0, 1]  # file order
