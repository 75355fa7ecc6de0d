// Package arashi is Arashi, the web e-mail service of the SEDA thesis
// (chapter 6 §3; the vehicle of chapter 7's overload experiments), built on
// Haboob's stages with a SQLite mail store.
//
// Use Start first: it opens or generates the mail store, wires the stage
// graph of configs/arashi.yaml and serves it (cmd/arashi is Start behind
// flags). For finer control, Open a DB, Generate into it, make an App, add
// its handlers to a stage.Registry with Register and build the manager
// yourself.
//
// The graph is Haboob's (HttpRecv's URL dispatch, the page cache for the
// static login page, HttpSend) plus one stage per request type, each with
// its own admission predicate (an rt controller by default):
//
//	/login               Login         user name and password → a 64-bit session key, 303 to /folders
//	/logout?s=KEY        Login         ends the session (the key opens nothing afterwards), 303 to /
//	/folders?s=KEY       ListFolders   the user's folders with message counts
//	/list?s&f[&page&sort] ListMessages a page of 50 headers of a folder, by date, sender or subject, with newer/older links
//	/show?s&m            ShowMessage   one message, marked read
//	/delete (POST s, m)  Delete        to Trash (removed if already there), 303 back to the folder
//	/refile (POST s,m,to) Refile       to another folder, 303 back to the folder
//	/search?s&q          Search        SQLite FTS5 full-text search over the user's messages
//	/compose, /send      Compose       the form, and delivery to a user's Inbox and one's Sent
//
// The session key is carried in every link (thesis §6.3.1); pages come from
// html/template. Sent is one's own mail: it shows no unread state. A request's class is its X-Class header (package http), so
// multiclass predicates on these stages tell users apart. Its principal
// (account, session and principal-ordering predicates) is its logged-in
// user, "user:NAME", found from its s= key when the HTTP server parses it
// (haboob.Options.Principal); a request without a live session is its
// client's address.
//
// The mail store (DB) is SQLite through the pure-Go modernc.org/sqlite in
// WAL mode behind a bounded pool of connections (the thesis's database
// connection pooling): each request type's stage runs its queries itself,
// so that the time a stage's rt controller measures includes its database
// work, as the thesis's PyTeC stages did. Generate fills it
// deterministically for a seed: Inbox sizes from a log-normal
// distribution (median 50) clamped to 1..12,794 messages (user1 has the largest),
// texts from a Zipf-distributed vocabulary.
//
// Config.Degrade switches on service degradation (thesis §7.2.2, Figs.
// 56–57; see Degrade): ListFolders leaves the message counts out,
// ListMessages and Search list fewer messages, while their rt controller's
// 90th-percentile response time is over target; DegradeAdmission also
// turns admission control back on at the lowest quality. Pages say so and
// carry an X-Quality header.
//
// Package arashi/load is the thesis's client: emulated users following
// the Markov model of Fig. 46 with 20 ms think time.
//
// What it does not do: TLS (Haboob's aio can; the configuration does not
// ask for it), folder creation, attachments, real passwords (generated
// users have passN), persistence of sessions across restarts.
package arashi
