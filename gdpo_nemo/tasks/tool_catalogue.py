"""Our own catalogue of tools for the offline tool-calling set.

Each tool has a JSON schema for its parameters (what the system prompt shows), a sampler
of concrete argument values, and request templates that state every argument value in
the user's words, so that a small model can copy them into the call. Optional arguments
are kept or dropped per request; a kept one adds its phrase to the request.

Value types are chosen so that copying works: numbers appear in the request as they
serialize in JSON (`250`, `72.5`), text values are JSON strings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

CITIES = [
    "Paris", "Tokyo", "Nairobi", "Lima", "Toronto", "Berlin", "Sydney", "Cairo", "Mumbai",
    "Oslo", "Madrid", "Seoul", "Chicago", "Dublin", "Lisbon", "Hanoi", "Denver", "Quito",
    "Prague", "Manila", "Austin", "Helsinki", "Santiago", "Auckland",
]
COUNTRIES = ["Brazil", "Kenya", "Japan", "Canada", "Norway", "India", "Peru", "Egypt", "Chile", "Vietnam", "Spain", "Ghana"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CAD", "INR", "CHF", "AUD", "MXN", "KRW"]
LANGUAGES = ["French", "German", "Spanish", "Japanese", "Italian", "Portuguese", "Korean", "Swahili"]
PHRASES = [
    "good morning", "where is the train station", "thank you very much", "the meeting starts at noon",
    "I would like a cup of tea", "see you tomorrow", "how much does this cost", "happy birthday",
]
SYMBOLS = ["AAPL", "MSFT", "NVDA", "TSLA", "AMZN", "IBM", "INTC", "ORCL", "SAP", "SONY"]
UNIT_PAIRS = [
    ("kilometers", "miles"), ("miles", "kilometers"), ("pounds", "kilograms"), ("kilograms", "pounds"),
    ("liters", "gallons"), ("gallons", "liters"), ("inches", "centimeters"), ("feet", "meters"),
]
EVENTS = ["Team sync", "Dentist appointment", "Lunch with Sam", "Project review", "Yoga class", "Parent meeting"]
QUERIES = [
    "best hiking trails near Denver", "how to repot a cactus", "history of the bicycle",
    "easy bread recipes", "solar eclipse dates", "python list comprehension examples",
    "electric car charging tips", "why is the sky blue",
]
CUISINES = ["Thai", "Italian", "Mexican", "Ethiopian", "Japanese", "Indian", "Greek", "Korean"]
TOPICS = ["space exploration", "climate", "football", "elections", "technology", "medicine", "music"]
TASKS_TODO = ["buy groceries", "call the plumber", "renew passport", "water the plants", "pay rent", "book dentist"]
WORDS = ["ephemeral", "ubiquitous", "serendipity", "laconic", "gregarious", "meticulous", "resilient", "candid"]
SONGS = [("Blue Horizon", "The Tides"), ("Paper Moon Waltz", "Ada Lark"), ("Northbound", "Echo Field"),
         ("Ember Lights", "Mira Stone"), ("Quiet Harbor", "The Lanterns")]
NAMES = ["alex", "priya", "tom", "mei", "omar", "lena"]
SUBJECTS = ["Budget update", "Trip plans", "Meeting notes", "Quick question", "Weekend schedule"]
BODIES = ["The report is ready.", "Can we talk on Friday?", "I will be ten minutes late.", "Thanks for your help."]
TIMER_LABELS = ["pasta", "laundry", "break", "tea", "workout"]


def _date(rng: random.Random) -> str:
    return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _time(rng: random.Random) -> str:
    return f"{rng.randint(7, 20):02d}:{rng.choice(['00', '15', '30', '45'])}"


def _string(description: str, **extra) -> dict:
    return {"type": "string", "description": description, **extra}


def _integer(description: str) -> dict:
    return {"type": "integer", "description": description}


def _number(description: str) -> dict:
    return {"type": "number", "description": description}


@dataclass(frozen=True, eq=False)  # compared by identity: each catalogue entry is unique
class Tool:
    """One catalogue tool.

    properties: JSON schema of each parameter, in the order calls list them.
    required: names of the parameters every call must pass; the others are optional.
    sample: draws a value for every parameter (optional ones included).
    requests: user request templates naming every required parameter as `{name}`.
    optional_phrases: for each optional parameter, the sentence a request gains when the
        call passes it.
    """

    name: str
    description: str
    properties: dict
    required: tuple
    sample: Callable[[random.Random], dict]
    requests: tuple
    optional_phrases: dict

    @property
    def schema(self) -> dict:
        """The JSON schema of the parameters, as the system prompt shows it."""
        return {"type": "object", "properties": self.properties, "required": list(self.required)}


CATALOGUE: tuple = (
    Tool(
        "get_weather", "Current weather conditions in a city.",
        {"city": _string("City name"), "unit": _string("Temperature unit", enum=["celsius", "fahrenheit"])},
        ("city",),
        lambda r: {"city": r.choice(CITIES), "unit": r.choice(["celsius", "fahrenheit"])},
        ("What is the weather like in {city} right now?", "Check the current weather in {city}."),
        {"unit": "Give the temperature in {unit}."},
    ),
    Tool(
        "get_forecast", "Daily weather forecast for a city for the next few days.",
        {"city": _string("City name"), "days": _integer("Number of days, 1 to 7")},
        ("city", "days"),
        lambda r: {"city": r.choice(CITIES), "days": r.randint(1, 7)},
        ("Give me the {days}-day forecast for {city}.", "What will the weather be in {city} over the next {days} days?"),
        {},
    ),
    Tool(
        "convert_currency", "Convert an amount of money from one currency to another.",
        {"amount": _number("Amount to convert"), "from_currency": _string("ISO code of the source currency"),
         "to_currency": _string("ISO code of the target currency")},
        ("amount", "from_currency", "to_currency"),
        lambda r: dict(zip(("from_currency", "to_currency"), r.sample(CURRENCIES, 2)), amount=r.choice([r.randint(5, 5000), r.randint(10, 999) + 0.5])),
        ("Convert {amount} {from_currency} to {to_currency}.", "How much is {amount} {from_currency} in {to_currency}?"),
        {},
    ),
    Tool(
        "convert_units", "Convert a measurement between units of length, mass or volume.",
        {"value": _number("The measurement"), "from_unit": _string("Unit of the value"), "to_unit": _string("Unit to convert to")},
        ("value", "from_unit", "to_unit"),
        lambda r: dict(zip(("from_unit", "to_unit"), r.choice(UNIT_PAIRS)), value=r.randint(1, 500)),
        ("Convert {value} {from_unit} to {to_unit}.", "How many {to_unit} are {value} {from_unit}?"),
        {},
    ),
    Tool(
        "create_event", "Add an event to the user's calendar.",
        {"title": _string("Event title"), "date": _string("Date as YYYY-MM-DD"), "start_time": _string("Start time as HH:MM, 24-hour"),
         "duration_minutes": _integer("Length of the event in minutes")},
        ("title", "date", "start_time"),
        lambda r: {"title": r.choice(EVENTS), "date": _date(r), "start_time": _time(r), "duration_minutes": r.choice([15, 30, 45, 60, 90])},
        ("Put \"{title}\" on my calendar on {date} at {start_time}.", "Schedule \"{title}\" for {date} at {start_time}."),
        {"duration_minutes": "It lasts {duration_minutes} minutes."},
    ),
    Tool(
        "list_events", "List the events on the user's calendar for one day.",
        {"date": _string("Date as YYYY-MM-DD")},
        ("date",),
        lambda r: {"date": _date(r)},
        ("What is on my calendar on {date}?", "Show my schedule for {date}."),
        {},
    ),
    Tool(
        "web_search", "Search the web and return result titles and links.",
        {"query": _string("Search terms"), "max_results": _integer("How many results to return")},
        ("query",),
        lambda r: {"query": r.choice(QUERIES), "max_results": r.randint(3, 10)},
        ("Search the web for \"{query}\".", "Look up \"{query}\" online."),
        {"max_results": "Return {max_results} results."},
    ),
    Tool(
        "get_stock_price", "Latest trading price of a stock.",
        {"symbol": _string("Ticker symbol")},
        ("symbol",),
        lambda r: {"symbol": r.choice(SYMBOLS)},
        ("What is the stock price of {symbol} right now?", "Get me the latest {symbol} share price."),
        {},
    ),
    Tool(
        "translate_text", "Translate text into another language.",
        {"text": _string("Text to translate"), "target_language": _string("Language to translate into")},
        ("text", "target_language"),
        lambda r: {"text": r.choice(PHRASES), "target_language": r.choice(LANGUAGES)},
        ("Translate \"{text}\" into {target_language}.", "How do you say \"{text}\" in {target_language}?"),
        {},
    ),
    Tool(
        "set_timer", "Start a countdown timer.",
        {"minutes": _integer("Timer length in minutes"), "label": _string("Name shown when the timer ends")},
        ("minutes",),
        lambda r: {"minutes": r.randint(1, 90), "label": r.choice(TIMER_LABELS)},
        ("Set a timer for {minutes} minutes.", "Start a {minutes}-minute timer."),
        {"label": "Label it \"{label}\"."},
    ),
    Tool(
        "send_email", "Send an email.",
        {"to": _string("Recipient email address"), "subject": _string("Subject line"), "body": _string("Message text")},
        ("to", "subject", "body"),
        lambda r: {"to": f"{r.choice(NAMES)}@example.com", "subject": r.choice(SUBJECTS), "body": r.choice(BODIES)},
        ("Email {to} with the subject \"{subject}\" and the message \"{body}\".",
         "Send an email to {to}, subject \"{subject}\", saying \"{body}\"."),
        {},
    ),
    Tool(
        "get_local_time", "Current local time in a city.",
        {"city": _string("City name")},
        ("city",),
        lambda r: {"city": r.choice(CITIES)},
        ("What time is it in {city} right now?", "Tell me the local time in {city}."),
        {},
    ),
    Tool(
        "calculate_tip", "Tip amount for a restaurant bill.",
        {"bill_amount": _number("Bill total"), "tip_percent": _integer("Tip as a percentage")},
        ("bill_amount", "tip_percent"),
        lambda r: {"bill_amount": r.randint(12, 300), "tip_percent": r.choice([10, 12, 15, 18, 20, 25])},
        ("How much is a {tip_percent} percent tip on a bill of {bill_amount}?", "Work out a {tip_percent}% tip for a {bill_amount} bill."),
        {},
    ),
    Tool(
        "find_restaurants", "Find restaurants in a city by cuisine.",
        {"city": _string("City name"), "cuisine": _string("Type of food"), "max_results": _integer("How many restaurants to list")},
        ("city", "cuisine"),
        lambda r: {"city": r.choice(CITIES), "cuisine": r.choice(CUISINES), "max_results": r.randint(2, 8)},
        ("Find {cuisine} restaurants in {city}.", "Where can I eat {cuisine} food in {city}?"),
        {"max_results": "List {max_results} of them."},
    ),
    Tool(
        "search_flights", "Search flights between two cities on a date.",
        {"origin": _string("Departure city"), "destination": _string("Arrival city"), "date": _string("Travel date as YYYY-MM-DD")},
        ("origin", "destination", "date"),
        lambda r: dict(zip(("origin", "destination"), r.sample(CITIES, 2)), date=_date(r)),
        ("Find flights from {origin} to {destination} on {date}.", "Are there flights from {origin} to {destination} on {date}?"),
        {},
    ),
    Tool(
        "get_news", "Latest news headlines on a topic.",
        {"topic": _string("News topic"), "count": _integer("Number of headlines")},
        ("topic",),
        lambda r: {"topic": r.choice(TOPICS), "count": r.randint(3, 10)},
        ("What is the latest news about {topic}?", "Show me news headlines on {topic}."),
        {"count": "I want {count} headlines."},
    ),
    Tool(
        "calculate_bmi", "Body mass index from weight and height.",
        {"weight_kg": _number("Weight in kilograms"), "height_cm": _number("Height in centimeters")},
        ("weight_kg", "height_cm"),
        lambda r: {"weight_kg": r.choice([r.randint(45, 120), r.randint(45, 119) + 0.5]), "height_cm": r.randint(150, 200)},
        ("What is the BMI of someone who weighs {weight_kg} kg and is {height_cm} cm tall?", "Calculate my BMI: {weight_kg} kg, {height_cm} cm."),
        {},
    ),
    Tool(
        "add_todo", "Add an item to the user's to-do list.",
        {"task": _string("What to do"), "priority": _string("Priority", enum=["low", "medium", "high"])},
        ("task",),
        lambda r: {"task": r.choice(TASKS_TODO), "priority": r.choice(["low", "medium", "high"])},
        ("Add \"{task}\" to my to-do list.", "Put \"{task}\" on my to-do list."),
        {"priority": "Give it {priority} priority."},
    ),
    Tool(
        "get_distance", "Travel distance between two cities.",
        {"origin": _string("Start city"), "destination": _string("End city"), "unit": _string("Distance unit", enum=["km", "miles"])},
        ("origin", "destination"),
        lambda r: dict(zip(("origin", "destination"), r.sample(CITIES, 2)), unit=r.choice(["km", "miles"])),
        ("How far is {origin} from {destination}?", "What is the distance between {origin} and {destination}?"),
        {"unit": "Answer in {unit}."},
    ),
    Tool(
        "define_word", "Dictionary definition of an English word.",
        {"word": _string("The word")},
        ("word",),
        lambda r: {"word": r.choice(WORDS)},
        ("What does \"{word}\" mean?", "Define the word \"{word}\"."),
        {},
    ),
    Tool(
        "track_package", "Delivery status of a parcel.",
        {"tracking_number": _string("Carrier tracking number")},
        ("tracking_number",),
        lambda r: {"tracking_number": f"TRK{r.randint(10_000_000, 99_999_999)}"},
        ("Where is my package {tracking_number}?", "Track the parcel with number {tracking_number}."),
        {},
    ),
    Tool(
        "play_music", "Play a song on the user's speaker.",
        {"song": _string("Song title"), "artist": _string("Artist name")},
        ("song",),
        lambda r: dict(zip(("song", "artist"), r.choice(SONGS))),
        ("Play \"{song}\".", "Put on the song \"{song}\"."),
        {"artist": "It is by {artist}."},
    ),
    Tool(
        "get_population", "Population of a country in a given year.",
        {"country": _string("Country name"), "year": _integer("Year")},
        ("country", "year"),
        lambda r: {"country": r.choice(COUNTRIES), "year": r.randint(1960, 2020)},
        ("What was the population of {country} in {year}?", "How many people lived in {country} in {year}?"),
        {},
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in CATALOGUE}

# Requests no catalogue tool serves, with a fitting direct reply: the "no call" items.
CHAT_REQUESTS = (
    ("Hello there!", "Hello! What can I do for you today?"),
    ("Thanks, that is all I needed.", "You are welcome. Have a good day!"),
    ("Can you tell me a short joke?", "Why did the scarecrow win an award? Because he was outstanding in his field."),
    ("What is 7 plus 5?", "7 plus 5 is 12."),
    ("Which is bigger, 9 or 4?", "9 is bigger than 4."),
    ("Say good night to me.", "Good night, sleep well!"),
    ("What color do you get by mixing blue and yellow?", "Mixing blue and yellow gives green."),
    ("How many days are in a week?", "A week has 7 days."),
    ("Spell the word cat backwards.", "Backwards, cat is tac."),
    ("Who are you?", "I am an assistant that can use tools to help with your requests."),
    ("Give me a word that rhymes with moon.", "Spoon rhymes with moon."),
    ("What is the opposite of hot?", "The opposite of hot is cold."),
)
