"""Writes a static-form fleet of N tools for the start-up benchmark: DIR/p<i>.json, one file per
provider, 20 tools each (the mean of the real fleet that took 74-98 s), with descriptions and
schemas drawn from a fixed vocabulary by a seeded generator, so that tools differ as real ones
do (a catalog of near-identical descriptions would measure the near-duplicate findings instead).

usage: gen_catalog.py DIR N
"""
import json
import random
import sys

VERBS = "fetch list create update delete search summarize export import validate render sync archive restore compare merge tag schedule cancel approve".split()
NOUNS = ("issue repository branch commit invoice customer order shipment ticket incident alert dashboard metric trace "
         "deployment cluster volume bucket object queue topic message calendar event contact document page comment "
         "review release artifact package secret certificate domain record zone user group role policy report").split()
QUALS = ("recent archived pending failed shared private draft published remote local weekly monthly nightly "
         "critical stale duplicate encrypted signed unsigned paginated filtered sorted cached").split()
LIMITS = ["Returns at most 100 items.", "Fails when the item does not exist.", "Needs write access.",
          "Read-only; never changes anything.", "Times out after 30 seconds.", "Results are paginated by cursor."]


def tool(rng, name):
    verb, noun, qual = rng.choice(VERBS), rng.choice(NOUNS), rng.choice(QUALS)
    other = rng.sample(NOUNS, 3)
    desc = (f"{verb.capitalize()} {qual} {noun}s of the {other[0]} by {other[1]} and {other[2]}. "
            f"Use it to {verb} a {noun} when you know its {other[0]}. {rng.choice(LIMITS)}")
    props = {}
    for p in rng.sample(NOUNS, rng.randint(1, 4)):
        props[f"{p}_id"] = {"type": "string", "description": f"The {p}'s identifier"}
    return {"name": name, "description": desc,
            "inputSchema": {"type": "object", "properties": props, "required": list(props)[:1],
                            "additionalProperties": False}}


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(1234)
    per = 20
    for p in range((n + per - 1) // per):
        count = min(per, n - p * per)
        tools = [tool(rng, f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}_{i}") for i in range(count)]
        with open(f"{out}/p{p}.json", "w") as f:
            json.dump({"provider": f"svc{p}", "bridge": {"command": "/bin/true"}, "tools": tools}, f)


main()
