package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// listenRetry is how long Listen waits before it connects again after
// losing its connection.
const listenRetry = time.Second

// Listen calls fn on each NOTIFY of channel (by any process on the
// database) until ctx is done. It listens on a connection of its own,
// outside the pool, and connects again when that connection is lost.
// Notifications sent while it was not listening are lost: fn is also
// called each time it starts listening, so that fn (which should re-read
// whatever it watches) catches up. fn runs on Listen's goroutine and
// should return quickly; calls are not queued up while it runs.
func (db *DB) Listen(ctx context.Context, channel string, fn func()) {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig)
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				db.log.Warn("listen for notifications", "channel", channel, "err", err)
			}
		},
		ReconnectDelay: listenRetry,
	}
	l.Handle(channel, listenHandler(fn))
	l.Listen(ctx) // returns only once ctx is done
}

// listenHandler calls a function on every notification, and once the
// listener listens (its backlog: what it may have missed).
type listenHandler func()

func (h listenHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	h()
	return nil
}

func (h listenHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	h()
	return nil
}

// Notify sends a notification (no payload) on channel to every listener
// of the database. Listeners that are not connected at that moment miss
// it.
func (db *DB) Notify(ctx context.Context, channel string) error {
	if _, err := db.pool.Exec(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}
