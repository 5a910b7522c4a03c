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

// devices indexes one user's session entries by device: a short slice
// sorted by device (most users have one or two: no map to allocate), or a
// map once the user has had more than devicesListMax at once.
type devices struct {
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
	if d.m != nil {
		return len(d.m)
	}
	return len(d.list)
}

func (d *devices) get(device string) *entry {
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

// add indexes an entry whose device the index does not hold.
func (d *devices) add(e *entry) {
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

func (d *devices) remove(device string) {
	if d.m != nil {
		delete(d.m, device)
		return
	}
	if i, ok := searchDevice(d.list, device); ok {
		d.list = slices.Delete(d.list, i, i+1)
	}
}

// sorted returns the entries sorted by device.
func (d *devices) sorted() []*entry {
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
	var d devices
	d.add(e)
	r.byUser.put(e.s.User, d)
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
		if d.m != nil {
			for _, e := range d.m {
				f(e)
			}
			continue
		}
		for _, x := range d.list {
			f(x.e)
		}
	}
}
