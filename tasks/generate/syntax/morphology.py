"""English verb morphology the voice transforms need: irregular forms, ``-ed`` participles, 3rd person
singular."""

from __future__ import annotations

import re

_IRREGULAR_SRC = (
    "arise arose arisen|awake awoke awoken|be was been|bear bore borne|beat beat beaten|become became become|"
    "begin began begun|bend bent bent|bet bet bet|bid bid bid|bind bound bound|bite bit bitten|bleed bled bled|"
    "blow blew blown|break broke broken|breed bred bred|bring brought brought|broadcast broadcast broadcast|"
    "build built built|buy bought bought|cast cast cast|catch caught caught|choose chose chosen|"
    "cling clung clung|come came come|cost cost cost|creep crept crept|cut cut cut|deal dealt dealt|"
    "dig dug dug|do did done|draw drew drawn|drink drank drunk|drive drove driven|eat ate eaten|"
    "fall fell fallen|feed fed fed|feel felt felt|fight fought fought|find found found|flee fled fled|"
    "fling flung flung|fly flew flown|forbid forbade forbidden|forecast forecast forecast|"
    "forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten|give gave given|"
    "go went gone|grind ground ground|grow grew grown|hang hung hung|have had had|hear heard heard|"
    "hide hid hidden|hit hit hit|hold held held|hurt hurt hurt|keep kept kept|know knew known|lay laid laid|"
    "lead led led|leave left left|lend lent lent|let let let|light lit lit|lose lost lost|make made made|"
    "mean meant meant|meet met met|mislead misled misled|mistake mistook mistaken|overcome overcame overcome|"
    "override overrode overridden|overtake overtook overtaken|pay paid paid|put put put|quit quit quit|"
    "read read read|rewrite rewrote rewritten|ride rode ridden|ring rang rung|rise rose risen|run ran run|"
    "say said said|see saw seen|seek sought sought|sell sold sold|send sent sent|set set set|"
    "shake shook shaken|shed shed shed|shoot shot shot|show showed shown|shut shut shut|sing sang sung|"
    "sink sank sunk|sit sat sat|sleep slept slept|slide slid slid|speak spoke spoken|spend spent spent|"
    "spin spun spun|split split split|spread spread spread|stand stood stood|steal stole stolen|"
    "stick stuck stuck|sting stung stung|strike struck struck|swear swore sworn|sweep swept swept|"
    "swim swam swum|swing swung swung|take took taken|teach taught taught|tear tore torn|tell told told|"
    "think thought thought|throw threw thrown|understand understood understood|undertake undertook undertaken|"
    "undo undid undone|upset upset upset|wake woke woken|wear wore worn|weave wove woven|win won won|"
    "wind wound wound|withdraw withdrew withdrawn|withhold withheld withheld|write wrote written"
)
#: lemma -> (simple past, past participle) for irregular verbs.
IRREGULAR: dict[str, tuple[str, str]] = {
    w[0]: (w[1], w[2]) for w in (entry.split() for entry in _IRREGULAR_SRC.split("|"))}
_DOUBLING = {"admit", "commit", "permit", "submit", "omit", "prefer", "refer", "occur", "control", "regret",
             "transfer", "equip", "compel", "expel", "propel", "patrol", "confer", "deter", "incur"}
_CVC = re.compile(r"^[^aeiou]*[aeiou][bdgklmnprt]$")


def regular_participle(lemma: str) -> str:
    """``-ed`` form of a regular verb (approve -> approved, carry -> carried, stop -> stopped)."""
    w = lemma.lower()
    if w.endswith("e"):
        return w + "d"
    if len(w) > 1 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ied"
    if w in _DOUBLING or _CVC.match(w):
        return w + w[-1] + "ed"
    return w + "ed"


def third_singular(lemma: str) -> str:
    """Present 3rd person singular (approve -> approves, watch -> watches, carry -> carries)."""
    w = lemma.lower()
    if w in ("have", "do", "go"):
        return {"have": "has", "do": "does", "go": "goes"}[w]
    if w.endswith(("s", "x", "z", "ch", "sh")):
        return w + "es"
    if len(w) > 1 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"

