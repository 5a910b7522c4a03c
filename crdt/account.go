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
