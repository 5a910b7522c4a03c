package crdt

import "strings"

// Account is the account-level record of one user: settings that apply
// across all of the user's devices. Any gateway may write it (the one the
// user issued the change on); replicas keep the write with the greatest
// (Stamp, Writer).
type Account struct {
	User     string
	Override Override
	// AuthoritativeDevice, when it has an active session, gives the user's
	// status (rule 3 of Aggregate). Empty for none.
	AuthoritativeDevice string
	Stamp               Timestamp // hybrid logical clock of the write
	Writer              string    // node name of the writer, the tiebreak

	Origin  Origin
	Version uint64

	// Text and Emoji are the user's status text (at most
	// MaxStatusTextChars characters of UTF-8) and emoji (at most
	// MaxStatusEmojiBytes bytes); empty for none.
	Text  string
	Emoji string
	// Until, when not 0, is when (Unix nanoseconds) Override, Text and
	// Emoji lapse: from then on the account shows none of them, with no
	// write (Lapsed). AuthoritativeDevice does not lapse.
	Until int64
}

// CompareAccounts orders two writes of the same user's account record.
func CompareAccounts(a, b *Account) int {
	if c := a.Stamp.Compare(b.Stamp); c != 0 {
		return c
	}
	if c := strings.Compare(a.Writer, b.Writer); c != 0 {
		return c
	}
	if c := int(a.Override) - int(b.Override); c != 0 {
		return sign(c)
	}
	if c := strings.Compare(a.AuthoritativeDevice, b.AuthoritativeDevice); c != 0 {
		return c
	}
	if c := strings.Compare(a.Text, b.Text); c != 0 {
		return c
	}
	if c := strings.Compare(a.Emoji, b.Emoji); c != 0 {
		return c
	}
	if a.Until != b.Until {
		if a.Until < b.Until {
			return -1
		}
		return 1
	}
	if a.Origin != b.Origin {
		if a.Origin.less(b.Origin) {
			return -1
		}
		return 1
	}
	return cmpU64(a.Version, b.Version)
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

// Lapsed reports whether the account's Until has passed at now (Unix
// nanoseconds): its override, text and emoji no longer count.
func (a *Account) Lapsed(now int64) bool { return a.Until != 0 && now >= a.Until }

// Effective returns the account as it shows at now: once lapsed, without
// its override, text, emoji and until. A write that starts from the held
// account starts from this, so a lapsed setting never comes back.
func (a Account) Effective(now int64) Account {
	if a.Lapsed(now) {
		a.Override, a.Text, a.Emoji, a.Until = OverrideNone, "", "", 0
	}
	return a
}
