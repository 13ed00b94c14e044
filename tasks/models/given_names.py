"""Given names and the sex they are usually given to, and surnames, read from the person providers of Faker (MIT
licensed; the first- and last-name lists of the locales in :data:`LOCALES`, drawn from national name statistics).

The pseudonymiser reads an original first name here, so that its surrogate keeps the name's gender ("his son,
Jason" does not become "his son, Vera"), and the PII detector asks whether a word a place is named by is also a
person's given name ("Virginia" and "Charlotte" are; "Bermuda" is not). A name both lists hold (Jordan, Leslie) is
one of either sex; one neither holds has none here. The detector also asks whether a span of common words holds a
name at all ("Will Smith" does; "Head Start", a programme, does not).
"""

from __future__ import annotations

import functools
import importlib

#: Faker locales whose female and male first-name lists are read (Latin script: the names a text in English,
#: Spanish, French, German, Italian, Portuguese, Dutch, Polish, Swahili or Yoruba carries).
LOCALES = ("en_US", "en_GB", "en_IE", "en_IN", "en_NZ", "es_ES", "es_MX", "fr_FR", "de_DE", "it_IT", "pt_BR",
           "nl_NL", "pl_PL", "sw", "yo_NG")
FEMALE, MALE, EITHER = "female", "male", "either"


@functools.cache
def _lists() -> tuple[frozenset[str], frozenset[str]]:
    """(female, male) given names of every locale of :data:`LOCALES`, as Faker spells them."""
    female: set[str] = set()
    male: set[str] = set()
    for locale in LOCALES:
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        female.update(provider.first_names_female)
        male.update(provider.first_names_male)
    return frozenset(female), frozenset(male)


def _spelt(name: str) -> str:
    """``name`` capitalised as the lists spell it ("JASON" and "jason" are "Jason")."""
    return name[:1].upper() + name[1:].lower() if name.isupper() or name.islower() else name


def given_name_sex(name: str) -> str | None:
    """:data:`FEMALE` or :data:`MALE` where ``name`` is a given name of that sex only, :data:`EITHER` where it is
    one of both ("Charlie", "Jordan"); None for a name the lists do not hold."""
    female, male = _lists()
    spelt = _spelt(name)
    if spelt in female:
        return EITHER if spelt in male else FEMALE
    return MALE if spelt in male else None


def is_given_name(name: str) -> bool:
    """Whether ``name`` is a given name (of either sex) in the lists."""
    return given_name_sex(name) is not None


@functools.cache
def _surnames() -> frozenset[str]:
    """The last names of every locale of :data:`LOCALES`, as Faker spells them (some locales weight them: a dict)."""
    out: set[str] = set()
    for locale in LOCALES:
        out.update(importlib.import_module(f"faker.providers.person.{locale}").Provider.last_names)
    return frozenset(out)


def is_name(word: str) -> bool:
    """Whether ``word`` is a given name or a surname in the lists ("Bill", "Smith", "Gates"; not "Head")."""
    return is_given_name(word) or _spelt(word) in _surnames()


def vocabulary() -> str:
    """What the lists are (part of the signatures of what reads them): Faker's version."""
    from importlib.metadata import version

    return f"faker-{version('faker')}"
