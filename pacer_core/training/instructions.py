"""Chat instructions for distilling the embedded draft model.

`training_instructions()` composes ~1,500 distinct prompts from templates and topic lists;
`heldout_instructions()` is a separate hand-written list used only for evaluation (never trained on).
Both are deterministic for a given seed.
"""
from __future__ import annotations

import random
from pathlib import Path

SCIENCE = ["photosynthesis", "gravity", "the water cycle", "black holes", "DNA", "volcanoes", "earthquakes",
           "rainbows", "magnets", "electricity", "the moon's phases", "tides", "the greenhouse effect", "vaccines",
           "evolution", "atoms", "sound waves", "the seasons", "clouds", "lightning", "the immune system",
           "plate tectonics", "solar eclipses", "friction", "buoyancy", "the speed of light", "bacteria",
           "the human heart", "digestion", "batteries", "nuclear fusion", "climate change", "erosion",
           "fossils", "the solar system", "static electricity", "chemical reactions", "the nervous system"]
TECH = ["the internet", "machine learning", "a computer's CPU", "cloud computing", "encryption", "blockchain",
        "a database", "an operating system", "Wi-Fi", "GPS", "a compiler", "recursion", "open source software",
        "version control with git", "a web browser", "email", "binary numbers", "a neural network",
        "an API", "cybersecurity", "solar panels", "electric cars", "3D printing", "smartphones", "robots"]
EVERYDAY = ["sleeping better", "saving money", "staying focused while studying", "learning a new language",
            "cooking healthy meals", "staying hydrated", "reducing stress", "making new friends",
            "keeping a plant alive", "starting to run", "organizing a small kitchen", "writing a good email",
            "preparing for a job interview", "public speaking", "managing time", "reading more books",
            "traveling on a budget", "taking care of a dog", "learning to draw", "keeping a journal",
            "waking up early", "being more productive at home", "eating less sugar", "recycling at home",
            "planning a birthday party", "studying for an exam", "staying safe online", "cleaning a messy room",
            "learning to swim", "growing tomatoes", "making a good cup of coffee", "staying warm in winter"]
POEM_TOPICS = ["the ocean", "autumn leaves", "a rainy day", "the night sky", "a cat", "friendship", "the city at dawn",
               "mountains", "a lost key", "spring flowers", "a cup of tea", "the wind", "an old tree", "snow",
               "a lighthouse", "the sun", "a river", "time", "home", "a library", "the first day of school",
               "a butterfly", "the desert", "music", "a candle", "a bicycle ride", "stars", "the forest", "summer"]
COUNTRIES = ["France", "Japan", "Brazil", "Canada", "Egypt", "Australia", "Italy", "Germany", "India", "Mexico",
             "Kenya", "Spain", "Norway", "Argentina", "China", "Russia", "Greece", "Turkey", "Peru", "Sweden",
             "Portugal", "Thailand", "Nigeria", "Chile", "Poland", "Vietnam", "Ireland", "Morocco", "Cuba", "Iran"]
ANIMALS = ["elephants", "dolphins", "owls", "bees", "penguins", "tigers", "octopuses", "ants", "wolves", "whales",
           "frogs", "eagles", "horses", "bats", "sharks", "koalas", "camels", "snakes", "parrots", "turtles"]
PEOPLE = ["Albert Einstein", "Marie Curie", "Isaac Newton", "Leonardo da Vinci", "Ada Lovelace", "Charles Darwin",
          "William Shakespeare", "Nikola Tesla", "Galileo Galilei", "Cleopatra", "Mozart", "Jane Austen",
          "Abraham Lincoln", "Alan Turing", "Aristotle", "Mahatma Gandhi", "Napoleon", "Frida Kahlo"]
PY_TASKS = ["reverses a string", "checks if a number is prime", "returns the factorial of n",
            "computes the nth Fibonacci number", "counts the vowels in a string", "finds the largest number in a list",
            "removes duplicates from a list", "checks if a word is a palindrome", "sorts a list of tuples by the second item",
            "converts Celsius to Fahrenheit", "sums the digits of an integer", "merges two sorted lists",
            "counts word frequencies in a text", "flattens a nested list", "returns the average of a list",
            "checks if two strings are anagrams", "finds the second largest number in a list",
            "capitalizes every word in a sentence", "returns the even numbers from a list", "computes the GCD of two numbers",
            "reads a file and counts its lines", "converts a list of strings to integers", "finds the longest word in a sentence",
            "implements binary search", "checks if a year is a leap year", "generates a random password"]
LANGS = ["Python", "JavaScript", "C", "Java", "Rust", "Go"]
STORY_STARTS = ["a dragon who is afraid of fire", "a robot who wants to paint", "a girl who finds a magic map",
                "a boy and his talking dog", "a lonely lighthouse keeper", "a cat who becomes king",
                "two friends lost in a forest", "a tiny mouse with big dreams", "a wizard who forgot his spells",
                "a bird that cannot fly", "a child who can talk to trees", "a pirate looking for treasure",
                "an astronaut on a strange planet", "a baker who makes magic bread", "a snowman in summer",
                "a detective solving a missing cookie case", "a turtle who wants to win a race", "a princess who builds a machine",
                "a ghost who is afraid of people", "a little train climbing a mountain", "a fox and a crow",
                "a teddy bear that comes to life", "a girl who collects clouds", "a farmer and a golden goose"]
OBJECTS = ["a pencil", "a smartphone", "a bicycle", "a coffee mug", "a backpack", "an umbrella", "a chair",
           "a lamp", "a pair of headphones", "a watch", "a notebook", "a water bottle", "a pair of shoes"]
COMPARE = [("cats", "dogs"), ("tea", "coffee"), ("summer", "winter"), ("books", "movies"), ("the sun", "the moon"),
           ("a city", "the countryside"), ("Python", "JavaScript"), ("trains", "planes"), ("weather", "climate"),
           ("viruses", "bacteria"), ("renting", "buying a house"), ("running", "swimming"), ("paper books", "e-books"),
           ("speed", "velocity"), ("mass", "weight"), ("a lake", "a sea"), ("HTML", "CSS"), ("RAM", "storage")]
WORDS = ["happy", "big", "fast", "beautiful", "smart", "cold", "brave", "quiet", "strong", "bright", "old", "funny"]
SUMMARY_TEXTS = [
    "The city council met on Tuesday to discuss the new park. Many residents said they wanted more trees and a playground. The mayor promised to present a plan next month.",
    "Bees are important for farming because they pollinate many crops. In recent years, bee populations have declined because of pesticides, disease and loss of habitat. Scientists are studying ways to protect them.",
    "Maria started learning the guitar last year. At first her fingers hurt and she wanted to quit, but she practiced every day. Now she plays songs for her family every weekend.",
    "The company released a new phone with a larger battery and a better camera. Reviewers praised the screen but said the price was too high for most people.",
    "Walking for thirty minutes a day can improve heart health, lift your mood and help you sleep better. Doctors recommend it for people of all ages.",
    "The library will close for two weeks for repairs to the roof. During this time, books can be returned at the community center, and the online catalogue will stay open.",
    "A small village in the mountains has started using solar power. The panels were installed last spring, and now the village produces more electricity than it uses.",
    "Tom forgot his lunch at home. At school his friend Sam shared half of his sandwich. The next day Tom brought cookies to thank him.",
]
MATH_NAMES = ["Anna", "Ben", "Carlos", "Dina", "Eli", "Fatima", "George", "Hana", "Ivan", "Julia", "Kofi", "Lena"]
MATH_ITEMS = ["apples", "pencils", "stickers", "cookies", "marbles", "books", "oranges", "toy cars", "cards", "balloons"]


def _filled(rows) -> list[str]:
    """Every row's templates filled with each of its items ("{}": the item; "{0}", "{1}": a pair's two parts)."""
    return [template.format(*item) if isinstance(item, tuple) else template.format(item)
            for items, templates in rows for item in items for template in templates]


def _simple_templates() -> list[str]:
    return _filled([
        (SCIENCE + TECH, ["Explain {} in simple terms.", "What is {}?", "Explain {} to a ten-year-old.",
                          "Give me three interesting facts about {}."]),
        (EVERYDAY, ["Give me 3 tips for {}.", "What are some good ways of {}?",
                    "I need advice on {}. Where should I start?"]),
        (POEM_TOPICS, ["Write a short poem about {}.", "Write a haiku about {}.",
                       "Write a four-line rhyming poem about {}."]),
        (COUNTRIES, ["What is the capital of {}?", "Tell me about the culture of {}.", "What is {} famous for?"]),
        (ANIMALS, ["Tell me some fun facts about {}.", "Where do {} live and what do they eat?"]),
        (PEOPLE, ["Who was {}?", "What is {} best known for?"]),
        (PY_TASKS, ["Write a Python function that {}."]
         + [f"Write a {lang} function that {{}}." for lang in LANGS[1:3]]),
        (STORY_STARTS, ["Write a short story about {}.", "Tell me a bedtime story about {}.",
                        "Write the opening paragraph of a story about {}."]),
        (OBJECTS, ["Describe {} to someone who has never seen one.", "Write a product description for {}.",
                   "List five creative uses for {}."]),
        (COMPARE, ["What is the difference between {0} and {1}?", "Compare {0} and {1}."]),
        (WORDS, ["Give me five synonyms for the word '{}'.", "Use the word '{}' in three different sentences.",
                 "What is the opposite of '{}'?"]),
        (SUMMARY_TEXTS, ["Summarize the following text in one sentence:\n\n{}",
                         "What is the main idea of this paragraph?\n\n{}",
                         "Rewrite this text in simpler words:\n\n{}"]),
    ])


def _math_problems(rng: random.Random, count: int) -> list[str]:
    problems = []
    for _ in range(count):
        name, other = rng.sample(MATH_NAMES, 2)
        item = rng.choice(MATH_ITEMS)
        a, b, c = rng.randint(3, 40), rng.randint(2, 15), rng.randint(2, 9)
        kind = rng.randrange(6)
        if kind == 0:
            problems.append(f"{name} has {a} {item}. {other} gives {name} {b} more. How many {item} does {name} have now?")
        elif kind == 1:
            problems.append(f"{name} had {a + b} {item} and gave {b} to {other}. How many are left?")
        elif kind == 2:
            problems.append(f"There are {c} boxes with {b} {item} in each box. How many {item} are there in total?")
        elif kind == 3:
            problems.append(f"{name} wants to share {b * c} {item} equally among {c} friends. How many does each friend get?")
        elif kind == 4:
            problems.append(f"What is {a} times {b}?")
        else:
            problems.append(f"A shop sells {item} for {c} dollars each. How much do {b} {item} cost?")
    return problems


def _open_questions() -> list[str]:
    return ["What is the meaning of life?", "How do I make pancakes?", "Why is the sky blue?", "How does a plane fly?",
            "What should I cook for dinner tonight?", "Tell me a joke.", "Tell me a riddle.", "What is love?",
            "How do I tie a tie?", "What are the benefits of exercise?", "How many planets are in the solar system?",
            "What is the tallest mountain in the world?", "Why do we dream?", "How does the stock market work?",
            "What is a good name for a pet goldfish?", "Can you help me write a thank-you note to my teacher?",
            "Write a birthday message for my best friend.", "Write a polite email asking for a day off.",
            "What is artificial intelligence?", "How do I boil an egg?", "What is the largest ocean?",
            "Why do leaves change color in the fall?", "How are rainbows formed?", "What is a healthy breakfast?",
            "Hi! How are you today?", "What can you do?", "Who are you?", "Translate 'good morning' into French.",
            "Translate 'thank you very much' into Spanish.", "What year did World War II end?",
            "Explain what a noun is, with examples.", "What is the difference between 'their', 'there' and 'they're'?",
            "Write a limerick about a cat.", "Write a motivational quote.", "Give me a recipe for a simple salad.",
            "Plan a one-day trip to the beach.", "List the days of the week in order.", "What is 15% of 200?",
            "Convert 5 kilometers to miles.", "How many minutes are in a day?", "What is the square root of 144?"]


MORE_TOPICS = ["the printing press", "the Roman Empire", "the pyramids of Egypt", "the Olympic Games", "chess",
               "the piano", "coffee", "chocolate", "bread", "paper", "glass", "the compass", "the wheel",
               "money", "banks", "taxes", "democracy", "elections", "the United Nations", "the stock market",
               "vitamins", "sleep", "memory", "dreams", "emotions", "habits", "kindness", "honesty", "teamwork",
               "photography", "painting", "jazz", "rock music", "ballet", "theater", "poetry", "novels",
               "football", "basketball", "tennis", "yoga", "meditation", "gardening", "camping", "fishing",
               "oceans", "deserts", "rainforests", "glaciers", "rivers", "islands", "caves", "waterfalls",
               "the Amazon river", "the Sahara desert", "Mount Everest", "the Great Wall of China", "the Moon landing",
               "the Industrial Revolution", "the Renaissance", "ancient Greece", "the Vikings", "dinosaurs",
               "mammals", "insects", "birds migration", "coral reefs", "honey", "salt", "sugar", "plastic",
               "wind power", "nuclear power", "oil", "steam engines", "satellites", "rockets", "telescopes",
               "microscopes", "x-rays", "antibiotics", "the brain", "the lungs", "bones", "muscles", "skin",
               "social media", "video games", "podcasts", "online shopping", "remote work", "passwords",
               "spreadsheets", "search engines", "artificial intelligence", "virtual reality", "drones"]
FOODS = ["pancakes", "banana bread", "vegetable soup", "fried rice", "guacamole", "a fruit smoothie", "lemonade",
         "scrambled eggs", "a grilled cheese sandwich", "pasta with pesto", "chocolate chip cookies", "hummus",
         "a chicken curry", "oatmeal", "mashed potatoes", "a green salad", "pizza dough", "apple pie", "popcorn"]
JOBS = ["a nurse", "a pilot", "an architect", "a librarian", "a firefighter", "a chef", "a software engineer",
        "a teacher", "a farmer", "a dentist", "a journalist", "an electrician", "a lawyer", "a scientist",
        "a police officer", "a plumber", "a photographer", "a pharmacist", "a carpenter", "an astronaut"]
GAMES = ["chess", "checkers", "hide and seek", "soccer", "basketball", "volleyball", "rock paper scissors",
         "Monopoly", "Scrabble", "hangman", "Sudoku", "bowling", "badminton", "dominoes", "musical chairs"]
PLACES = ["the beach", "a big city", "the mountains", "a museum", "a zoo", "a farm", "a forest", "a library",
          "a train station", "a night market", "an island", "a small village", "a space station", "a castle"]
FEELINGS = ["nervous before a test", "lonely in a new city", "angry at a friend", "bored on a weekend",
            "tired all the time", "overwhelmed at work", "sad after a move", "worried about money"]
CHARACTERS = [("a cat", "a dog"), ("a customer", "a waiter"), ("two astronauts", "mission control"),
              ("a doctor", "a patient"), ("a parent", "a child"), ("two friends", "a shopkeeper"),
              ("a robot", "a scientist"), ("a tourist", "a local guide"), ("a coach", "a player")]


def _more_templates() -> list[str]:
    return _filled([
        (MORE_TOPICS + SCIENCE + TECH, [
            "How does {} work?", "Why is {} important?", "Tell me about the history of {}.",
            "Write a short paragraph about {}.", "What are the pros and cons of {}?", "Explain {} in two sentences.",
            "Write a tweet about {}.", "What are some common misconceptions about {}?", "Write a quiz question about {}."]),
        (FOODS, ["Give me a simple recipe for {}.", "How do I make {}?", "What ingredients do I need for {}?",
                 "Describe the taste of {}."]),
        (JOBS, ["What does {} do?", "How do I become {}?", "What skills does {} need?", "Describe a typical day of {}."]),
        (GAMES, ["Explain the rules of {}.", "Give me tips for getting better at {}."]),
        (PLACES, ["Describe {} in the early morning.", "What should I bring to {}?", "Write a short story set in {}.",
                  "Write a poem about {}."]),
        (FEELINGS, ["I feel {}. What can I do?", "How can I help a friend who feels {}?"]),
        (CHARACTERS, ["Write a short dialogue between {0} and {1}."]),
        ([animal[:-1] if animal.endswith("s") else animal for animal in ANIMALS], ["Write a short story about {}."]),
        (ANIMALS, ["Why are {} important for nature?", "Write a haiku about {}."]),
        (PEOPLE, ["Write a short biography of {}.", "What can we learn from {}?"]),
        (COUNTRIES, ["What food is {} known for?", "Plan a three-day trip to {}."]),
        (WORDS + ["kind", "calm", "curious", "tiny", "huge", "gentle", "sad", "proud"],
         ["What does the word '{}' mean?", "Write a sentence using the word '{}'."]),
        (PY_TASKS, ["Explain how to write a program that {}.", "Write a Go function that {}."]),
    ])


def _word_overlap(first: str, second: str) -> float:
    first_words, second_words = set(first.lower().split()), set(second.lower().split())
    return len(first_words & second_words) / max(1, len(first_words | second_words))


def extra_instructions(seed: int = 0, max_overlap: float = 0.5) -> list[str]:
    """More distinct training prompts from a second set of templates, excluding everything already in
    `training_instructions()` and anything sharing more than `max_overlap` of its words with a held-out
    prompt (so near-copies of evaluation prompts are never trained on)."""
    rng = random.Random(seed + 1)
    heldout = heldout_instructions()
    seen = set(training_instructions(seed)) | set(heldout)
    prompts = _more_templates() + _math_problems(rng, 400)
    unique = sorted(prompt for prompt in set(prompts) - seen
                    if not resembles_evaluation(prompt, heldout, max_overlap))
    rng.shuffle(unique)
    return unique


def evaluation_prompts() -> list[str]:
    """Every prompt the project evaluates or benchmarks with: the held-out list plus the prompts in
    assets/prompts/*.jsonl (benchmark and pre-verifier validation sets)."""
    from ..prompts import load_prompts

    prompts = list(heldout_instructions())
    for path in sorted((Path(__file__).resolve().parents[2] / "assets" / "prompts").glob("*.jsonl")):
        prompts += [str(record["prompt"]) for record in load_prompts(str(path))]
    return prompts


def resembles_evaluation(instruction: str, evaluation: list[str], max_overlap: float = 0.5) -> bool:
    """True when `instruction` shares more than `max_overlap` of its words with an evaluation prompt."""
    return any(_word_overlap(instruction, other) > max_overlap for other in evaluation)


def training_instructions(seed: int = 0) -> list[str]:
    """Distinct training prompts (deterministic order, shuffled with `seed`)."""
    rng = random.Random(seed)
    prompts = _simple_templates() + _open_questions() + _math_problems(rng, 300)
    unique = sorted(set(prompts) - set(heldout_instructions()))
    rng.shuffle(unique)
    return unique


def heldout_instructions() -> list[str]:
    """Evaluation-only prompts: never used for training."""
    return [
        "Explain how a refrigerator keeps food cold.", "Write a short poem about a quiet morning by a lake.",
        "Give me 3 tips for learning to play the piano.", "What is the capital of Austria?",
        "Write a Python function that returns the squares of the numbers in a list.",
        "Summarize the plot of Cinderella in two sentences.", "Why do cats purr?",
        "Tom has 12 marbles and loses 5. Then he finds 3 more. How many marbles does he have?",
        "Write a short story about a penguin who wants to visit the jungle.", "What causes thunder?",
        "Explain what inflation is in simple terms.", "Give me three ideas for a rainy weekend at home.",
        "Describe the taste of a lemon to someone who has never had one.", "What are the main parts of a flower?",
        "Write a haiku about a train at night.", "How do airplanes stay in the air?",
        "What is the difference between a frog and a toad?", "Write a thank-you message to a neighbor who helped me move.",
        "List five fruits that are high in vitamin C.", "What is the boiling point of water at sea level?",
        "Explain what a variable is in programming.", "Tell me about the history of the bicycle.",
        "How can I be more patient with other people?", "Write a tweet announcing a new bakery opening.",
        "What does a veterinarian do?", "Give me a simple recipe for tomato soup.",
        "Why is exercise good for the brain?", "Who invented the telephone?",
        "Write a short dialogue between a teacher and a student about homework.", "What is a prime number?",
        "Explain why we have day and night.", "What should I pack for a camping trip?",
        "Write a four-line poem about a sleepy puppy.", "How does recycling help the environment?",
        "What are three things that make a good friend?", "Explain the rules of tic-tac-toe.",
        "A pizza is cut into 8 slices and 3 people each eat 2 slices. How many slices are left?",
        "What is the largest animal on Earth?", "Write a JavaScript function that checks if a number is even.",
        "Describe a sunset over the ocean.",
    ]


if __name__ == "__main__":
    train = training_instructions()
    print(len(train), "training instructions;", len(heldout_instructions()), "held-out")
    for line in train[:15]:
        print(" -", line.replace("\n", " ")[:100])
