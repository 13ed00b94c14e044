"""Protect: rewrite a corpus until an attacker it never trained against fails, at a stated budget, keeping
meaning (:mod:`tasks.protect.loop`); release the result with a dataset card (:mod:`tasks.protect.release`)."""
