"""Word lists the generated knowledge base draws its invented names and facts from.

Names are built from syllables (onset + vowel, an optional coda) and typed endings, so they
read like place or person names without being real ones.
"""

# fmt: off
ONSETS = (
    "b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr",
    "r", "s", "st", "t", "tr", "v", "z", "th", "sh", "c", "j", "w", "y", "ql", "sk",
)
VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia", "y")
CODAS = ("", "", "n", "r", "l", "s", "m", "th", "nd", "rk", "st", "x")
PLACE_ENDINGS = ("mor", "heim", "ford", "wick", "holm", "dale", "gard", "port", "by", "stead",
                  "brook", "mouth", "vale", "ton", "grad", "ora", "ene", "ium")
COUNTRY_ENDINGS = ("ia", "land", "istan", "ova", "ene", "aria", "onia", "eth")
SURNAME_ENDINGS = ("son", "ova", "er", "ski", "berg", "ard", "ley", "ane", "etti", "aby",
                    "ström", "ović", "ez", "wood", "ith", "enko")
CONTINENTS = ("the Verrant continent", "the Ossalic Isles", "the Northern Reach",
               "the Calder Basin", "the Sundering Coast")
CURRENCIES = ("crown", "mark", "thaler", "drach", "sol", "florin", "real", "lira")
OCCUPATIONS = ("novelist", "poet", "film director", "engineer", "physicist", "painter",
                "architect", "politician", "chemist", "economist", "singer", "entrepreneur")
INDUSTRIES = ("shipbuilding", "software", "textile", "food processing", "mining",
               "pharmaceutical", "publishing", "railway", "brewing", "aerospace", "insurance")
COMPANY_WORDS = ("Works", "Industries", "Dynamics", "Holdings", "Systems", "Foods",
                  "Mills", "Group", "Labs", "Trading Company", "Press", "Motors")
ADJECTIVES = ("Silent", "Crimson", "Hollow", "Distant", "Golden", "Broken", "Hidden",
               "Bitter", "Quiet", "Burning", "Northern", "Pale", "Endless", "Winter",
               "Restless", "Iron", "Glass", "Seventh", "Last", "Forgotten", "Salt",
               "Velvet", "Copper", "Wandering", "Sleeping", "Scarlet", "Amber", "Frozen")
NOUNS = ("Harbour", "Orchard", "Lantern", "River", "Garden", "Mirror", "Tower", "Meadow",
          "Bridge", "Compass", "Archive", "Voyage", "Cathedral", "Island", "Signal",
          "Season", "Letter", "Frontier", "Chorus", "Harvest", "Kingdom", "Shore",
          "Orchid", "Engine", "Canal", "Citadel", "Feather", "Labyrinth", "Window", "Tide")
BAND_NOUNS = ("Foxes", "Comets", "Lanterns", "Wolves", "Pilots", "Ravens", "Engines",
               "Tides", "Sparrows", "Giants", "Echoes", "Strangers", "Hearts", "Saints",
               "Knives", "Mirrors", "Owls", "Rivers", "Ghosts", "Mariners")
BOOK_GENRES = ("novel", "short-story collection", "poetry collection", "memoir",
                "detective novel", "historical novel", "science-fiction novel")
FILM_GENRES = ("drama", "comedy", "thriller", "documentary", "war", "musical", "western")
MUSIC_GENRES = ("folk", "rock", "jazz", "post-punk", "electronic", "blues", "pop")
FIELDS = ("law", "medicine", "engineering", "mathematics", "music", "agriculture",
           "philosophy", "architecture")
SEAS = ("the Amber Sea", "the Gulf of Tarn", "the Pale Ocean", "the Selvic Sea",
         "the Bay of Orrin")
# fmt: on
