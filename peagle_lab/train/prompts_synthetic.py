"""Programmatic math and writing prompts: templates filled from seeded random choices.

Magpie follows what the target likes to ask, which is mostly general chat; these two
sources make sure the drafter also sees arithmetic and algebra answers (digits, equations,
step-by-step layouts) and longer creative or business prose. All template text is written
here (no dataset is copied); every prompt passes ``Exclusions`` and exact (normalised)
repeats are dropped. Both generators are deterministic for a seed on any machine.
"""
from __future__ import annotations

import itertools
import random

from .prompts import Exclusions, normalize_prompt

NAMES = ("Amara", "Ben", "Chen", "Dalia", "Emeka", "Farah", "Gus", "Hana", "Ivan", "Jaya", "Kofi", "Lena", "Mateo",
         "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Viktor", "Wen", "Yusuf", "Zoe")
ITEMS = ("notebooks", "apples", "concert tickets", "bus passes", "paint brushes", "cupcakes", "plant pots",
         "chess sets", "bags of rice", "phone cases", "tennis balls", "candles")
# (from, to, factor): value_in_to = value_in_from * factor
UNITS = (("kilometres", "miles", 0.621371), ("miles", "kilometres", 1.609344), ("kilograms", "pounds", 2.20462),
         ("pounds", "kilograms", 0.453592), ("litres", "US gallons", 0.264172), ("inches", "centimetres", 2.54),
         ("hours", "minutes", 60), ("metres", "feet", 3.28084), ("cups", "millilitres", 236.588))

# (kind, template); the fields come from ``_math_fields``: every template uses a subset.
MATH_TEMPLATES = (
    ("change", "{name} buys {a} {items} at ${price} each and pays with a ${bill} bill. How much change does "
               "{name} get?"),
    ("rate", "{name} reads {a} pages every day. The book has {big} pages. How many days will it take {name} to "
             "finish it?"),
    ("ratio", "{name} and {name2} share {big} {items} in the ratio {r1}:{r2}. How many does each of them get?"),
    ("geometry", "A rectangular garden is {a} m long and {b} m wide. What are its area and its perimeter?"),
    ("saving", "{name} saves ${a} every week. How many weeks will it take to afford a bicycle that costs ${big}?"),
    ("scaling", "A recipe for {c} people needs {grams} grams of flour. How much flour is needed for {d} people?"),
    ("speed", "A train travels {dist} km in {hours} hours. What is its average speed, and how far does it go in "
              "{d} hours at that speed?"),
    ("multiply", "What is {x} × {y}? Show your working step by step."),
    ("add", "Compute {x} + {y} - {z} and explain each step."),
    ("divide", "What is {big} divided by {a}, and what is the remainder?"),
    ("fraction", "Simplify the fraction {num}/{den} to lowest terms."),
    ("fraction_add", "What is {p}/{q} + {r}/{s}? Give the answer as a fraction in lowest terms."),
    ("linear", "Solve for x: {a}x + {b} = {lin}."),
    ("system", "Solve the system of equations x + y = {sum_xy} and x - y = {diff_xy}."),
    ("factor", "Factor the quadratic x^2 + {p_sum}x + {p_prod}."),
    ("evaluate", "If f(x) = {a}x^2 - {b}x + {c}, what is f({d})?"),
    ("slope", "Find the slope of the line through the points ({x1}, {y1}) and ({x2}, {y2})."),
    ("percent_of", "What is {pct}% of {big}?"),
    ("discount", "A jacket costs ${price} and is on sale for {pct}% off. What is the sale price?"),
    ("percent_change", "{name}'s rent went from ${s1} to ${s2} a month. By what percentage did it change?"),
    ("growth", "A town of {pop} people grows by {pct}% a year. About how many people will live there after {d} "
               "years?"),
    ("convert", "Convert {v} {u_from} to {u_to}."),
    ("convert_explain", "How many {u_to} are in {v} {u_from}? Explain how you convert between them."),
    ("pace", "{name} runs {run_km} km in {minutes} minutes. What is the average speed in km/h?"),
)

# (form, phrasing, topic list): the phrasing takes {topic}; a constraint is appended.
THEMES = ("the first snow of winter", "a lighthouse keeper", "moving to a new city", "an old bicycle",
          "friendship between neighbours", "a rainy market day", "learning to cook", "the night sky",
          "a forgotten library book", "a small-town bakery", "the sea at dawn", "a long train journey",
          "a lost umbrella", "a grandmother's garden", "the last day of school", "a robot learning to paint",
          "a power cut in a big city", "the smell of fresh bread", "a marathon runner's last mile", "an abandoned mine",
          "a street musician", "the first day at a new job", "a kite festival", "a village during a flood",
          "a cat who rules the house", "an astronaut looking back at Earth", "autumn leaves", "a broken clock")
SITUATIONS = ("asking a landlord to repair a leaking sink", "inviting colleagues to a farewell lunch",
              "requesting a deadline extension from a professor", "following up after a job interview",
              "apologising to a customer for a late delivery", "asking a neighbour to keep the noise down at night",
              "proposing a new weekly team meeting time", "thanking a mentor for their advice",
              "declining a wedding invitation politely", "asking a manager for a day of leave",
              "reminding a friend about money they borrowed", "welcoming a new member to a book club",
              "complaining to a gym about broken equipment", "congratulating a colleague on a promotion")
PRODUCTS = ("a solar-powered camping lantern", "a reusable glass water bottle", "a foldable standing desk",
            "noise-cancelling headphones for children", "a hand-made ceramic teapot", "a weather-proof dog jacket",
            "a smart plant-watering sensor", "a wool travel blanket", "a bamboo cutting board",
            "an electric cargo bike", "a pocket-sized language translator", "a recycled-plastic backpack",
            "a cast-iron frying pan", "a board game for family evenings")
ROLES = ("junior data analyst", "barista at a busy cafe", "museum tour guide", "primary school teaching assistant",
         "warehouse team lead", "junior web developer", "hotel receptionist", "community garden coordinator",
         "bicycle mechanic", "night-shift nurse", "librarian at a public library", "social media assistant",
         "delivery driver", "event planner for a small charity")
DEBATES = ("a four-day working week", "banning cars from city centres", "school uniforms",
           "homework for young children", "remote work", "nuclear power", "year-round daylight saving time",
           "free public transport", "a tax on sugary drinks", "phones in classrooms", "space exploration budgets",
           "lowering the voting age to sixteen", "universal basic income", "zoos")
WRITING_FORMS = (
    ("poem", "Write a short poem about {topic}", THEMES),
    ("story", "Write a short story about {topic}", THEMES),
    ("diary", "Write a diary entry about {topic}", THEMES),
    ("speech", "Write the opening of a speech about {topic}", THEMES),
    ("blog", "Write the introduction of a blog post about {topic}", THEMES),
    ("letter", "Write a letter to a friend about {topic}", THEMES),
    ("email", "Write an email {topic}", SITUATIONS),
    ("message", "Draft a short text message {topic}", SITUATIONS),
    ("product", "Write a product description for {topic}", PRODUCTS),
    ("ad", "Write a radio advertisement for {topic}", PRODUCTS),
    ("review", "Write a customer review of {topic}", PRODUCTS),
    ("cover_letter", "Write a cover letter for a job as a {topic}", ROLES),
    ("job_ad", "Write a job advertisement for a {topic}", ROLES),
    ("summary", "Summarise the main arguments for and against {topic}", DEBATES),
    ("essay", "Write a persuasive paragraph in favour of {topic}", DEBATES),
    ("outline", "Write an outline for an essay on {topic}", DEBATES),
)
CONSTRAINTS = ("", " in under 100 words", " for a ten-year-old reader", " in a light, humorous tone",
               " in a formal tone", " in exactly three paragraphs", " and give it a title",
               " in the second person", " that ends with a question", " using simple, clear language",
               " in an enthusiastic tone", " for a busy reader, in five sentences or fewer", " with a clear structure",
               " without using any clichés")


def _math_fields(rng: random.Random) -> dict:
    """One set of values for every ``MATH_TEMPLATES`` field, consistent where a template needs it."""
    name, name2 = rng.sample(NAMES, 2)
    a, b, c, d = rng.randint(2, 12), rng.randint(2, 30), rng.randint(2, 8), rng.randint(2, 9)
    price = rng.randint(50, 2500) / 100
    total = a * price
    r1, r2 = rng.sample(range(1, 8), 2)
    num, den = rng.randint(2, 12) * (k := rng.randint(2, 9)), rng.randint(13, 30) * k
    x0, r_a, r_b = rng.randint(-9, 12), rng.randint(1, 9), rng.randint(1, 9)
    xs = sorted(rng.sample(range(-10, 11), 2))
    s1 = rng.randint(500, 2500)
    u_from, u_to, _ = rng.choice(UNITS)
    return dict(
        name=name, name2=name2, a=a, b=b, c=c, d=d, items=rng.choice(ITEMS), price=f"{price:.2f}",
        bill=next(v for v in (5, 10, 20, 50, 100, 200, 500, 1000) if v > total),
        big=(r1 + r2) * rng.randint(5, 60), r1=r1, r2=r2, grams=rng.randint(4, 40) * 25,
        dist=rng.randint(12, 90) * 5, hours=rng.randint(2, 6), run_km=rng.randint(3, 21), minutes=rng.randint(15, 150),
        x=rng.randint(12, 999), y=rng.randint(12, 999), z=rng.randint(2, 500), num=num, den=den,
        p=rng.randint(1, 5), q=rng.randint(2, 9), r=rng.randint(1, 5), s=rng.randint(2, 9),
        lin=a * x0 + b, sum_xy=2 * x0 + r_a, diff_xy=r_a, p_sum=r_a + r_b, p_prod=r_a * r_b,
        x1=xs[0], y1=rng.randint(-10, 10), x2=xs[1], y2=rng.randint(-10, 10),
        pct=rng.choice((5, 10, 12, 15, 20, 25, 30, 40, 60, 75)), s1=s1, s2=s1 + rng.randint(-300, 400),
        pop=rng.randint(20, 900) * 100, v=rng.randint(2, 250), u_from=u_from, u_to=u_to)


def math_prompts(n: int, seed: int = 0, exclude: Exclusions | None = None) -> list[tuple[str, str]]:
    """Up to ``n`` distinct math questions: word problems, arithmetic, algebra, percent, units.

    Args:
        n: how many prompts to make (fewer only if the templates cannot give ``n`` distinct ones).
        seed: fixes every choice of template, names and numbers.
        exclude: prompts to drop (counted in its ``hits``).

    Returns:
        ``[(prompt, group)]``; each prompt is its own group (numbers and names differ).

    Raises:
        ValueError: ``n`` is negative.

    >>> math_prompts(3, seed=1) == math_prompts(3, seed=1) != math_prompts(3, seed=2)
    True
    """
    if n < 0:
        raise ValueError(f"n={n} is out of range; expected >= 0")
    rng = random.Random(seed)
    exclude = exclude if exclude is not None else Exclusions()
    out, seen = [], set()
    for _ in range(20 * n):  # a bounded search: a tiny template set could never reach n
        if len(out) == n:
            break
        _, template = rng.choice(MATH_TEMPLATES)
        text = template.format(**_math_fields(rng))
        key = normalize_prompt(text)
        if key not in seen and exclude.allows(text):
            seen.add(key)
            out.append((text, text))
    return out


def writing_prompts(n: int, seed: int = 0, exclude: Exclusions | None = None) -> list[tuple[str, str]]:
    """Up to ``n`` distinct writing tasks: a form (poem, email, cover letter, …) × topic × constraint.

    There are 4,312 combinations; a larger ``n`` gives all of them.

    Args:
        n: how many prompts to make (at most the number of combinations).
        seed: fixes which combinations are taken, and in what order.
        exclude: prompts to drop (counted in its ``hits``).

    Returns:
        ``[(prompt, group)]`` with group ``writing/<form>/<topic>``, so the variants of one
        task (different constraints) fall on the same side of the held-out split.

    Raises:
        ValueError: ``n`` is negative.

    >>> writing_prompts(2, seed=0) == writing_prompts(2, seed=0)
    True
    """
    if n < 0:
        raise ValueError(f"n={n} is out of range; expected >= 0")
    exclude = exclude if exclude is not None else Exclusions()
    combos = [(form, phrasing, topic, constraint) for form, phrasing, topics in WRITING_FORMS
              for topic, constraint in itertools.product(topics, CONSTRAINTS)]
    random.Random(seed).shuffle(combos)
    out = []
    for form, phrasing, topic, constraint in combos:
        if len(out) == n:
            break
        text = phrasing.format(topic=topic) + constraint + "."
        if exclude.allows(text):
            out.append((text, f"writing/{form}/{topic}"))
    return out
