"""Incentives in collaborative learning (Werner's thesis, ch. 4): the price-discrimination game and its repeated
protocol. Pure functions; the repeated protocol's runs vmap into one compiled program."""
