"""Twelve built-in English (query, relevant passage) pairs: what ``diagnose`` scores a head on when no
training pairs are given, and the sentences the evaluation cost estimate encodes."""

SAMPLE_PAIRS = (
    ("what is the capital of france", "Paris is the capital and most populous city of France, on the Seine."),
    ("how do vaccines work", "Vaccines train the immune system to recognize a pathogen by exposing it to an antigen."),
    ("symptoms of vitamin d deficiency", "Low vitamin D can cause bone pain, muscle weakness and fatigue in adults."),
    ("who wrote pride and prejudice", "Pride and Prejudice is an 1813 novel of manners written by Jane Austen."),
    (
        "boiling point of water at altitude",
        "At higher altitudes air pressure is lower, so water boils below 100 degrees.",
    ),
    (
        "python list comprehension syntax",
        "A list comprehension builds a list from an iterable: [f(x) for x in items if cond].",
    ),
    (
        "causes of the first world war",
        "The assassination of Archduke Franz Ferdinand in 1914 triggered the First World War.",
    ),
    (
        "how does photosynthesis work",
        "Plants convert light, water and carbon dioxide into glucose and oxygen in chloroplasts.",
    ),
    (
        "best time to visit japan",
        "Spring cherry blossom season and autumn foliage are popular times to travel to Japan.",
    ),
    (
        "what is inflation in economics",
        "Inflation is the rate at which the general level of prices for goods rises over time.",
    ),
    (
        "treatment for type 2 diabetes",
        "Metformin, diet changes and exercise are first-line treatments for type 2 diabetes.",
    ),
    ("speed of light in vacuum", "Light travels at exactly 299,792,458 metres per second in a vacuum."),
)
