package crdt

import (
	"maps"
	"slices"
)

// devicesListMax is the most devices a user's index keeps as a sorted
// slice; past it the index becomes a map, so a user with very many devices
// (a client reconnecting without a device name gets a new one each time,
// and the tombstones stay for the horizon) costs O(1) per change, not
// O(devices).
const devicesListMax = 32

// devices indexes one user's session entries by device. Most users have
// one device, held inline: finding it loads nothing past the user index's
// slot, which holds this struct. A second device moves the index into a
// deviceSet, where it stays until the user leaves the index.
type devices struct {
	one  devRef     // the only device while many is nil; one.e nil: none
	many *deviceSet // from the second device on; one is then empty
}

// deviceSet indexes a user's entries by device: a short slice sorted by
// device, or a map once the user has had more than devicesListMax at once.
type deviceSet struct {
	list []devRef
	m    map[string]*entry
}

// devRef is a list item: the device name is kept beside the entry, so a
// lookup compares names without loading the entry or its record.
type devRef struct {
	device string
	e      *entry
}

func (d *devices) len() int {
	if d.many != nil {
		return d.many.len()
	}
	if d.one.e != nil {
		return 1
	}
	return 0
}

func (d *devices) get(device string) *entry {
	if d.many != nil {
		return d.many.get(device)
	}
	if d.one.e != nil && d.one.device == device {
		return d.one.e
	}
	return nil
}

// add indexes an entry whose device the index does not hold.
func (d *devices) add(e *entry) {
	switch {
	case d.many != nil:
		d.many.add(e)
	case d.one.e == nil:
		d.one = devRef{device: e.s.Device, e: e}
	default:
		d.many = &deviceSet{list: make([]devRef, 1, 2)}
		d.many.list[0] = d.one
		d.one = devRef{}
		d.many.add(e)
	}
}

func (d *devices) remove(device string) {
	if d.many != nil {
		d.many.remove(device)
	} else if d.one.e != nil && d.one.device == device {
		d.one = devRef{}
	}
}

// sorted returns the entries sorted by device.
func (d *devices) sorted() []*entry {
	if d.many != nil {
		return d.many.sorted()
	}
	if d.one.e != nil {
		return []*entry{d.one.e}
	}
	return nil
}

// each calls f for every entry, in no particular order.
func (d *devices) each(f func(*entry)) {
	if d.many == nil {
		if d.one.e != nil {
			f(d.one.e)
		}
		return
	}
	if d.many.m != nil {
		for _, e := range d.many.m {
			f(e)
		}
		return
	}
	for _, x := range d.many.list {
		f(x.e)
	}
}

func (d *deviceSet) len() int {
	if d.m != nil {
		return len(d.m)
	}
	return len(d.list)
}

func (d *deviceSet) get(device string) *entry {
	if d.m != nil {
		return d.m[device]
	}
	if len(d.list) <= 8 {
		for _, x := range d.list {
			if x.device == device {
				return x.e
			}
		}
		return nil
	}
	if i, ok := searchDevice(d.list, device); ok {
		return d.list[i].e
	}
	return nil
}

func (d *deviceSet) add(e *entry) {
	if d.m == nil && len(d.list) == devicesListMax {
		d.m = make(map[string]*entry, 2*devicesListMax)
		for _, x := range d.list {
			d.m[x.device] = x.e
		}
		d.list = nil
	}
	if d.m != nil {
		d.m[e.s.Device] = e
		return
	}
	i, _ := searchDevice(d.list, e.s.Device)
	d.list = slices.Insert(d.list, i, devRef{device: e.s.Device, e: e})
}

func (d *deviceSet) remove(device string) {
	if d.m != nil {
		delete(d.m, device)
		return
	}
	if i, ok := searchDevice(d.list, device); ok {
		d.list = slices.Delete(d.list, i, i+1)
	}
}

func (d *deviceSet) sorted() []*entry {
	out := make([]*entry, 0, d.len())
	if d.m == nil {
		for _, x := range d.list {
			out = append(out, x.e)
		}
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(d.m)) {
		out = append(out, d.m[k])
	}
	return out
}

// searchDevice finds a device in a list sorted by device.
func searchDevice(list []devRef, device string) (int, bool) {
	return slices.BinarySearchFunc(list, device, func(x devRef, d string) int {
		return compareStrings(x.device, d)
	})
}

// userEntry returns the entry of a user's device, or nil.
func (r *Replica) userEntry(k Key) *entry {
	d := r.byUser.ref(k.User)
	if d == nil {
		return nil
	}
	return d.get(k.Device)
}

// indexUser adds a new entry to its user's devices.
func (r *Replica) indexUser(e *entry) {
	if d := r.byUser.ref(e.s.User); d != nil {
		d.add(e)
		return
	}
	r.byUser.insert(e.s.User, devices{one: devRef{device: e.s.Device, e: e}})
}

// unindexUser removes an entry from its user's devices. byUser indexes
// sessions only (accounts have their own map), so an emptied user goes even
// when it has an account record.
func (r *Replica) unindexUser(k Key) {
	d := r.byUser.ref(k.User)
	if d == nil {
		return
	}
	d.remove(k.Device)
	if d.len() == 0 {
		r.byUser.delete(k.User)
	}
}

// entries calls f for every session entry, in no particular order.
func (r *Replica) entries(f func(*entry)) {
	for _, d := range r.byUser.all() {
		d.each(f)
	}
}
