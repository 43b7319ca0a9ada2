"""Incentives in collaborative learning (Werner's thesis, ch. 3 and 4): the duopoly of Defection-Free
Collaborative Learning (:mod:`~fedjax_clust.incentives.duopoly`), the price-discrimination game
(:mod:`~fedjax_clust.incentives.pd_game`) and its repeated protocol (:mod:`~fedjax_clust.incentives.pd_repeated`,
whose runs vmap into one compiled program). Pure functions."""
