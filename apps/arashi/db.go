package arashi

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// ErrNotFound is returned when a user, folder or message does not exist
// or does not belong to the session's user.
var ErrNotFound = errors.New("arashi: not found")

// DBConfig configures Open. Zero fields take the defaults shown.
type DBConfig struct {
	// Pool bounds the connections open at once (the thesis's database
	// connection pooling): a query waits for a free connection (default 4).
	Pool int
	// BusyTimeout is how long a writer waits for SQLite's write lock
	// (default 5s).
	BusyTimeout time.Duration
}

// DB is the mail store: SQLite in WAL mode (readers never wait for the
// writer) behind a bounded pool of connections. It is safe for concurrent
// use.
type DB struct {
	sql *sql.DB
	fts bool // the driver has FTS5: search uses the full-text index
}

// Folder is one of a user's mail folders.
type Folder struct {
	ID     int64
	Name   string
	Count  int
	Unread int
}

// Outgoing reports whether f holds the user's own sent mail (Sent): its
// messages have no unread state to show.
func (f Folder) Outgoing() bool { return f.Name == SentFolder }

// Message is a message's header, and its body when it was asked for.
type Message struct {
	ID       int64
	FolderID int64
	Folder   string
	From     string
	To       string
	Subject  string
	Date     time.Time
	Read     bool
	Body     string
}

const schema = `
CREATE TABLE IF NOT EXISTS users (
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL UNIQUE,
	password TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS folders (
	id INTEGER PRIMARY KEY,
	user_id INTEGER NOT NULL REFERENCES users(id),
	name TEXT NOT NULL,
	UNIQUE (user_id, name)
);
CREATE TABLE IF NOT EXISTS messages (
	id INTEGER PRIMARY KEY,
	user_id INTEGER NOT NULL REFERENCES users(id),
	folder_id INTEGER NOT NULL REFERENCES folders(id),
	sender TEXT NOT NULL,
	recipient TEXT NOT NULL,
	subject TEXT NOT NULL,
	date INTEGER NOT NULL,
	seen INTEGER NOT NULL DEFAULT 0,
	body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_folder_date ON messages(folder_id, date);
CREATE INDEX IF NOT EXISTS messages_user ON messages(user_id);
`

// The full-text index is an external-content FTS5 table kept in step by
// triggers (SQLite's documented pattern).
const ftsSchema = `
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(subject, body, content='messages', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
	INSERT INTO messages_fts(messages_fts, rowid, subject, body) VALUES ('delete', old.id, old.subject, old.body);
END;
`

const ftsInsertTrigger = `
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
	INSERT INTO messages_fts(rowid, subject, body) VALUES (new.id, new.subject, new.body);
END;`

// Open opens (creating if needed) the mail store at path.
func Open(path string, cfg DBConfig) (*DB, error) {
	if cfg.Pool == 0 {
		cfg.Pool = 4
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = 5 * time.Second
	}
	if cfg.Pool < 0 || cfg.BusyTimeout < 0 {
		return nil, fmt.Errorf("arashi: database pool %d and busy timeout %v must not be negative", cfg.Pool, cfg.BusyTimeout)
	}
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)",
		path, cfg.BusyTimeout.Milliseconds())
	s, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("arashi: open %s: %w", path, err)
	}
	s.SetMaxOpenConns(cfg.Pool)
	s.SetMaxIdleConns(cfg.Pool)
	db := &DB{sql: s}
	if _, err := s.Exec(schema); err != nil {
		s.Close()
		return nil, fmt.Errorf("arashi: schema of %s: %w", path, err)
	}
	if _, err := s.Exec(ftsSchema + ftsInsertTrigger); err == nil {
		db.fts = true
	} else if !strings.Contains(err.Error(), "fts5") {
		s.Close()
		return nil, fmt.Errorf("arashi: full-text index of %s: %w", path, err)
	}
	return db, nil
}

// Close closes the pool.
func (db *DB) Close() error { return db.sql.Close() }

// FullText reports whether search uses SQLite's FTS5 index (else a LIKE
// scan).
func (db *DB) FullText() bool { return db.fts }

// SQL returns the underlying pool (for tests and tools).
func (db *DB) SQL() *sql.DB { return db.sql }

// Login checks a user's password and returns the user's id.
func (db *DB) Login(ctx context.Context, name, password string) (int64, error) {
	var id int64
	var pw string
	err := db.sql.QueryRowContext(ctx, `SELECT id, password FROM users WHERE name = ?`, name).Scan(&id, &pw)
	if errors.Is(err, sql.ErrNoRows) || err == nil && pw != password {
		return 0, ErrNotFound
	}
	return id, err
}

// UserName returns a user's name.
func (db *DB) UserName(ctx context.Context, user int64) (string, error) {
	var name string
	err := db.sql.QueryRowContext(ctx, `SELECT name FROM users WHERE id = ?`, user).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	return name, err
}

// Folders lists a user's folders with their message counts (a count over
// each folder: the cost grows with the mailbox, as in the thesis).
func (db *DB) Folders(ctx context.Context, user int64) ([]Folder, error) {
	rows, err := db.sql.QueryContext(ctx, `
		SELECT f.id, f.name,
			(SELECT count(*) FROM messages m WHERE m.folder_id = f.id),
			(SELECT count(*) FROM messages m WHERE m.folder_id = f.id AND m.seen = 0)
		FROM folders f WHERE f.user_id = ? ORDER BY f.id`, user)
	return collect(rows, err, func(r *sql.Rows, f *Folder) error { return r.Scan(&f.ID, &f.Name, &f.Count, &f.Unread) })
}

// collect reads every row of a query (rows, err: its results) into a
// slice, scan filling in one value from the current row.
func collect[T any](rows *sql.Rows, err error, scan func(*sql.Rows, *T) error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// FolderNames lists a user's folders without counting their messages
// (Count and Unread are 0): what a refile menu needs.
func (db *DB) FolderNames(ctx context.Context, user int64) ([]Folder, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT id, name FROM folders WHERE user_id = ? ORDER BY id`, user)
	return collect(rows, err, func(r *sql.Rows, f *Folder) error { return r.Scan(&f.ID, &f.Name) })
}

// Folder returns one of the user's folders with its message count.
func (db *DB) Folder(ctx context.Context, user, folder int64) (Folder, error) {
	f := Folder{ID: folder}
	err := db.sql.QueryRowContext(ctx, `
		SELECT f.name, (SELECT count(*) FROM messages m WHERE m.folder_id = f.id)
		FROM folders f WHERE f.id = ? AND f.user_id = ?`, folder, user).Scan(&f.Name, &f.Count)
	if errors.Is(err, sql.ErrNoRows) {
		return f, ErrNotFound
	}
	return f, err
}

// Sort orders a message list.
type Sort string

// The orders of a message list.
const (
	ByDate    Sort = "date"
	BySender  Sort = "from"
	BySubject Sort = "subject"
)

func (s Sort) column() string {
	switch s {
	case BySender:
		return "sender, date DESC"
	case BySubject:
		return "subject, date DESC"
	}
	return "date DESC"
}

// Messages lists the headers of a page of a folder's messages (n from
// offset), newest first or in the given order.
func (db *DB) Messages(ctx context.Context, user, folder int64, order Sort, offset, n int) ([]Message, error) {
	rows, err := db.sql.QueryContext(ctx, `
		SELECT id, folder_id, sender, recipient, subject, date, seen FROM messages
		WHERE folder_id = ? AND user_id = ? ORDER BY `+order.column()+` LIMIT ? OFFSET ?`,
		folder, user, n, offset)
	return collect(rows, err, scanHeader)
}

// scanHeader reads a message's headers from a row.
func scanHeader(r *sql.Rows, m *Message) error {
	var date int64
	if err := r.Scan(&m.ID, &m.FolderID, &m.From, &m.To, &m.Subject, &date, &m.Read); err != nil {
		return err
	}
	m.Date = time.Unix(date, 0).UTC()
	return nil
}

// Message returns one of the user's messages with its body and marks it
// read.
func (db *DB) Message(ctx context.Context, user, id int64) (Message, error) {
	m := Message{ID: id}
	var date int64
	err := db.sql.QueryRowContext(ctx, `
		SELECT m.folder_id, f.name, m.sender, m.recipient, m.subject, m.date, m.seen, m.body
		FROM messages m JOIN folders f ON f.id = m.folder_id
		WHERE m.id = ? AND m.user_id = ?`, id, user).
		Scan(&m.FolderID, &m.Folder, &m.From, &m.To, &m.Subject, &date, &m.Read, &m.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return m, ErrNotFound
	}
	if err != nil {
		return m, err
	}
	m.Date = time.Unix(date, 0).UTC()
	if !m.Read {
		if _, err := db.sql.ExecContext(ctx, `UPDATE messages SET seen = 1 WHERE id = ?`, id); err != nil {
			return m, err
		}
	}
	return m, nil
}

// Delete moves one of the user's messages to its Trash folder, or removes
// it if it is in Trash already. It returns the folder it was in.
func (db *DB) Delete(ctx context.Context, user, id int64) (int64, error) {
	var from int64
	var name string
	err := db.sql.QueryRowContext(ctx, `
		SELECT m.folder_id, f.name FROM messages m JOIN folders f ON f.id = m.folder_id
		WHERE m.id = ? AND m.user_id = ?`, id, user).Scan(&from, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	if name == TrashFolder {
		_, err = db.sql.ExecContext(ctx, `DELETE FROM messages WHERE id = ?`, id)
		return from, err
	}
	_, err = db.sql.ExecContext(ctx, `
		UPDATE messages SET folder_id = (SELECT id FROM folders WHERE user_id = ? AND name = ?)
		WHERE id = ?`, user, TrashFolder, id)
	return from, err
}

// Refile moves one of the user's messages to another of the user's
// folders. It returns the folder it was in.
func (db *DB) Refile(ctx context.Context, user, id, to int64) (int64, error) {
	var from int64
	err := db.sql.QueryRowContext(ctx, `SELECT folder_id FROM messages WHERE id = ? AND user_id = ?`, id, user).Scan(&from)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	res, err := db.sql.ExecContext(ctx, `
		UPDATE messages SET folder_id = ? WHERE id = ? AND EXISTS (SELECT 1 FROM folders WHERE id = ? AND user_id = ?)`,
		to, id, to, user)
	if err != nil {
		return 0, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, ErrNotFound
	}
	return from, nil
}

// Search returns up to n of the user's messages whose subject or body
// contain the words of query (SQLite FTS5 when the driver has it; a LIKE
// scan otherwise).
func (db *DB) Search(ctx context.Context, user int64, query string, n int) ([]Message, error) {
	words := strings.FieldsFunc(query, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if len(words) == 0 {
		return nil, nil
	}
	var rows *sql.Rows
	var err error
	if db.fts {
		match := `"` + strings.Join(words, `" "`) + `"`
		rows, err = db.sql.QueryContext(ctx, `
			SELECT m.id, m.folder_id, m.sender, m.recipient, m.subject, m.date, m.seen
			FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
			WHERE messages_fts MATCH ? AND m.user_id = ? ORDER BY m.date DESC LIMIT ?`, match, user, n)
	} else {
		like := "%" + strings.Join(words, "%") + "%"
		rows, err = db.sql.QueryContext(ctx, `
			SELECT id, folder_id, sender, recipient, subject, date, seen FROM messages
			WHERE user_id = ? AND (subject LIKE ? OR body LIKE ?) ORDER BY date DESC LIMIT ?`, user, like, like, n)
	}
	return collect(rows, err, scanHeader)
}

// Send delivers a message from one user to another (by name): into the
// recipient's Inbox and a copy into the sender's Sent folder.
func (db *DB) Send(ctx context.Context, from int64, to, subject, body string, now time.Time) error {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var sender string
	if err := tx.QueryRowContext(ctx, `SELECT name FROM users WHERE id = ?`, from).Scan(&sender); err != nil {
		return err
	}
	var rcpt int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM users WHERE name = ?`, to).Scan(&rcpt)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: no user %q", ErrNotFound, to)
	}
	if err != nil {
		return err
	}
	for _, d := range []struct {
		user   int64
		folder string
		seen   int
	}{{rcpt, InboxFolder, 0}, {from, SentFolder, 1}} {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO messages(user_id, folder_id, sender, recipient, subject, date, seen, body)
			SELECT ?, id, ?, ?, ?, ?, ?, ? FROM folders WHERE user_id = ? AND name = ?`,
			d.user, sender, to, subject, now.Unix(), d.seen, body, d.user, d.folder); err != nil {
			return err
		}
	}
	return tx.Commit()
}
