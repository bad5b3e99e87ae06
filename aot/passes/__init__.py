"""Graph passes: each a pure function Graph -> Graph."""
