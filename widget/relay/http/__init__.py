"""The relay's HTTP room: the conversation API and the routes that features add to it, the contract documents,
the build's static files, mounting under a prefix, and the bounds on the HTTP edge."""
