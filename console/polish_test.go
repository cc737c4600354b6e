package console_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/txinbox/txinbox/console"
)

// The overview shows the health of the outbox's tables with the inbox's, and says what its Dead
// rows % is a share of (row versions, not messages), in the header's title and in a note.
func TestOverviewShowsOutboxTablesAndExplainsDeadRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	e.receive(t, "billing", "Invoice", "p-1")
	e.outboxDead(t, "no route", "orders")
	_, body := e.get(t, "/")
	for _, table := range []string{"inbox", "inbox_queue", "outbox", "outbox_queue"} {
		if !strings.Contains(body, `<tr data-table="`+table+`">`) {
			t.Errorf("the overview's tables lack %s:\n%s", table, body)
		}
	}
	if !strings.Contains(body, `title="dead row versions / (live rows + dead row versions) of the table: not dead letters">Dead rows %*</th>`) ||
		!strings.Contains(body, `id="dead-share-note"`) || !strings.Contains(body, "live rows + dead row versions") {
		t.Errorf("the overview does not say what Dead rows %% is a share of:\n%s", body)
	}
}

// The filters' time inputs ask for a time in words an operator reads (YYYY-MM-DDThh:mm), not Go's
// reference layout; an unreadable time is refused naming the same form.
func TestTimeInputsAskForAHumanLayout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	for _, path := range []string{"/dead", "/outbox/dead"} {
		_, body := e.get(t, path)
		if strings.Contains(body, "2006-01-02") || strings.Count(body, `placeholder="YYYY-MM-DDThh:mm"`) != 2 {
			t.Errorf("%s: the time inputs' placeholders are not YYYY-MM-DDThh:mm:\n%s", path, body)
		}
	}
	code, body := e.get(t, "/dead?since=yesterday")
	if code != 400 || !strings.Contains(body, "is not a time (YYYY-MM-DDThh:mm, UTC)") {
		t.Errorf("an unreadable time: %d\n%s", code, body)
	}
}

// A confirmation of one message speaks of it in the singular: "1 selected dead letter", "1 pending
// message", "1 dead outbox event"; of more, in the plural.
func TestConfirmationsAgreeInNumber(t *testing.T) {
	t.Parallel()
	e := newEnv(t, console.Config{})
	dead := e.receive(t, "billing", "Invoice", "d-1", "d-2")
	e.kill(t, "boom", dead...)
	e.receive(t, "retired", "Old", "p-1")
	ev := e.outboxDead(t, "no route", "orders")
	for path, want := range map[string]string{
		fmt.Sprintf("/dead/confirm?op=replay&scope=selected&id=%d", dead[0]):                `<strong id="confirm-count">1</strong> selected dead letter?`,
		fmt.Sprintf("/dead/confirm?op=replay&scope=selected&id=%d&id=%d", dead[0], dead[1]): `<strong id="confirm-count">2</strong> selected dead letters?`,
		"/dead/confirm?op=discard&scope=filter&consumer=billing":                            `all <strong id="confirm-count">2</strong> dead letters matching`,
		"/pending/confirm?consumer=retired":                                                 `<strong id="confirm-count">1</strong> pending message of consumer`,
		fmt.Sprintf("/outbox/dead/confirm?op=replay&scope=selected&id=%d", ev[0]):           `<strong id="confirm-count">1</strong> selected dead outbox event?`,
		"/outbox/dead/confirm?op=discard&scope=filter&topic=orders":                         `Discard <strong id="confirm-count">1</strong> dead outbox event matching`,
	} {
		if _, body := e.get(t, path); !strings.Contains(body, want) {
			t.Errorf("%s lacks %q:\n%s", path, want, body)
		}
	}
}
