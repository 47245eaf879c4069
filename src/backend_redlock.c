/* Redlock: one lock over N independent Redis masters (issue 4). */
