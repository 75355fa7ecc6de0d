package arashi

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The folders every generated user has.
const (
	InboxFolder   = "Inbox"
	SentFolder    = "Sent"
	ArchiveFolder = "Archive"
	TrashFolder   = "Trash"
)

// MaxFolder is the largest folder of the thesis's workload (§6.3.4: each
// emulated user's folder holds between 1 and 12,794 messages).
const MaxFolder = 12794

// GenConfig configures Generate. Zero fields take the defaults shown.
type GenConfig struct {
	Users int    // number of users (default 64)
	Seed  uint64 // the same seed generates the same mailboxes
	// MaxFolder is the largest Inbox (default MaxFolder, 12,794); user1
	// has it. Tests make it small.
	MaxFolder int
	// Median and Sigma shape the log-normal distribution of Inbox sizes,
	// clamped to [1, MaxFolder] (defaults 50 and 1.6: a mean near 170
	// messages, one user in a hundred with more than 2,000).
	Median float64
	Sigma  float64
	// Epoch is the date of the newest generated message (default
	// 2002-09-01, when the thesis was written).
	Epoch time.Time
}

// GenStats summarizes a generated database.
type GenStats struct {
	Users, Folders, Messages int
	Largest                  int // messages in the largest Inbox
	Elapsed                  time.Duration
}

// Credentials returns the name and password of generated user i (1-based):
// "user7" / "pass7".
func Credentials(i int) (name, password string) {
	return fmt.Sprintf("user%d", i), fmt.Sprintf("pass%d", i)
}

// InboxSize returns the Inbox size of generated user i (1-based) for a
// seed: user 1 has the largest folder (largest: MaxFolder for the
// thesis's workload); the others are drawn from a log-normal distribution
// (median, sigma) clamped to [1, largest]: heavy-tailed, as mail folders
// are.
func InboxSize(seed uint64, i, largest int, median, sigma float64) int {
	if i == 1 {
		return largest
	}
	r := rand.New(rand.NewPCG(seed, uint64(i)*0x9e3779b97f4a7c15))
	x := math.Exp(math.Log(median) + sigma*r.NormFloat64())
	return int(min(float64(largest), max(1, math.Round(x))))
}

// Generate fills an empty database with users, folders and messages,
// deterministically for cfg.Seed: each user has an Inbox of InboxSize
// messages, a Sent and an Archive folder of a few messages, and an empty
// Trash. Message texts are drawn from a Zipf-distributed vocabulary, so
// that common words match many messages and rare ones few.
func Generate(ctx context.Context, db *DB, cfg GenConfig) (GenStats, error) {
	start := time.Now()
	if cfg.Users == 0 {
		cfg.Users = 64
	}
	if cfg.Median == 0 {
		cfg.Median = 50
	}
	if cfg.Sigma == 0 {
		cfg.Sigma = 1.6
	}
	if cfg.MaxFolder == 0 {
		cfg.MaxFolder = MaxFolder
	}
	if cfg.Epoch.IsZero() {
		cfg.Epoch = time.Date(2002, 9, 1, 0, 0, 0, 0, time.UTC)
	}
	if cfg.Users < 1 || cfg.MaxFolder < 1 || cfg.Median < 1 || cfg.Sigma < 0 {
		return GenStats{}, fmt.Errorf("arashi: generate: users %d, max folder %d and median %v must be positive and sigma %v not negative",
			cfg.Users, cfg.MaxFolder, cfg.Median, cfg.Sigma)
	}
	var st GenStats
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return st, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		return st, err
	}
	if n > 0 {
		return st, fmt.Errorf("arashi: generate: the database already has %d users", n)
	}
	if db.fts {
		// Index once at the end (much faster than row by row).
		if _, err := tx.ExecContext(ctx, `DROP TRIGGER messages_ai`); err != nil {
			return st, err
		}
	}
	insUser, err := tx.PrepareContext(ctx, `INSERT INTO users(id, name, password) VALUES (?, ?, ?)`)
	if err != nil {
		return st, err
	}
	insFolder, err := tx.PrepareContext(ctx, `INSERT INTO folders(user_id, name) VALUES (?, ?)`)
	if err != nil {
		return st, err
	}
	insMsg, err := tx.PrepareContext(ctx, `
		INSERT INTO messages(user_id, folder_id, sender, recipient, subject, date, seen, body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return st, err
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	words := rand.NewZipf(r, 1.1, 2, uint64(len(vocabulary)-1))
	text := func(n int, b *strings.Builder) string {
		b.Reset()
		for i := 0; i < n; i++ {
			if i > 0 {
				if i%12 == 0 {
					b.WriteString(".\n")
				} else {
					b.WriteByte(' ')
				}
			}
			b.WriteString(vocabulary[words.Uint64()])
		}
		return b.String()
	}
	var sb strings.Builder
	for u := 1; u <= cfg.Users; u++ {
		name, pw := Credentials(u)
		if _, err := insUser.ExecContext(ctx, u, name, pw); err != nil {
			return st, err
		}
		st.Users++
		sizes := map[string]int{
			InboxFolder:   InboxSize(cfg.Seed, u, cfg.MaxFolder, cfg.Median, cfg.Sigma),
			SentFolder:    1 + r.IntN(20),
			ArchiveFolder: 1 + r.IntN(50),
			TrashFolder:   0,
		}
		st.Largest = max(st.Largest, sizes[InboxFolder])
		for _, f := range []string{InboxFolder, SentFolder, ArchiveFolder, TrashFolder} {
			res, err := insFolder.ExecContext(ctx, u, f)
			if err != nil {
				return st, err
			}
			fid, _ := res.LastInsertId()
			st.Folders++
			date := cfg.Epoch
			for i := 0; i < sizes[f]; i++ {
				peer, _ := Credentials(1 + r.IntN(cfg.Users))
				from, to := peer, name
				if f == SentFolder {
					from, to = name, peer
				}
				from += "@arashi.example"
				to += "@arashi.example"
				subject := text(2+r.IntN(6), &sb)
				body := text(20+r.IntN(200), &sb)
				seen := 0
				// Draw for every folder (the same seed still makes the
				// same mailboxes); one's own sent mail is read.
				if i > 10 || r.IntN(2) == 0 || f == SentFolder {
					seen = 1
				}
				if _, err := insMsg.ExecContext(ctx, u, fid, from, to, subject, date.Unix(), seen, body); err != nil {
					return st, err
				}
				st.Messages++
				date = date.Add(-time.Duration(1+r.IntN(36*3600)) * time.Second)
			}
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
	if db.fts {
		if _, err := tx.ExecContext(ctx, `INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')`); err != nil {
			return st, err
		}
		if _, err := tx.ExecContext(ctx, ftsInsertTrigger); err != nil {
			return st, err
		}
	}
	if err := tx.Commit(); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// vocabulary is the generator's word list, most frequent first (Zipf).
var vocabulary = strings.Fields(`
the to and of a in is for that you it on this with be are we have will not
at as from or can your by an if all but our about meeting please thanks
would there what one so do paper draft talk week next time just should
project seminar today code run results server thread event stage queue
kernel network java python database query cluster lab group review deadline
conference submission figure table benchmark measure load response latency
throughput overload control admission controller bucket token rate policy
socket request reply page cache miss disk file buffer memory garbage
collector compiler bytecode jit scheduler priority class user session login
folder message search delete refile compose send mail inbox archive trash
berkeley soda hall cory campus cafe coffee lunch dinner friday monday
tuesday wednesday thursday weekend vacation travel flight hotel budget
grant proposal advisor committee quals thesis chapter appendix related
work future lessons model architecture design implementation evaluation
experiment graph plot axis curve spike burst trace gnutella haboob
sandstorm seda ninja vspace dds jython pytec mysql apache flash tcp udp
ssl tls handshake certificate key nonce cookie header field body content
encoding chunked keepalive pipeline connection accept close reset timeout
retry backoff exponential linear additive multiplicative increase decrease
percentile median mean variance distribution pareto zipf heavy tail
ocelot walrus narwhal axolotl quokka pangolin tapir okapi dugong kinkajou
`)
