"""Claims as data and the reproduction report (``make report``, ``make readme``)."""
