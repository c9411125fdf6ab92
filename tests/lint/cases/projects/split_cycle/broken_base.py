class Broken(:  # expect: AMP000
    pass
