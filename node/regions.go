package node

import (
	"net/http"

	"github.com/rollcall/rollcall/cluster"
)

// RegionReporter is implemented by a Cluster that bridges regions
// (gossip.Cluster does): GET /v1/regions and the status page show what it
// knows of its region's bridges and the other regions. ok is false in a
// single-region cluster. It must be safe for concurrent use; the node
// never calls it with its lock held.
type RegionReporter interface {
	RegionStatus() (s cluster.RegionStatus, ok bool)
}

// RegionStatus is what GET /v1/regions answers. It is defined in package
// cluster, which gossip shares without importing node.
type RegionStatus = cluster.RegionStatus

// regionStatus returns what the cluster knows of the regions; ok is false
// when the node is standalone or its cluster is of one region.
func (n *Node) regionStatus() (RegionStatus, bool) {
	if r, ok := n.getCluster().(RegionReporter); ok {
		return r.RegionStatus()
	}
	return RegionStatus{}, false
}

// handleRegionsHTTP answers GET /v1/regions: this gateway's region, its
// region's bridges and active bridge, and the other regions with their
// lease state. A single-region (or standalone) gateway answers its region
// with no bridges and no other regions.
func (n *Node) handleRegionsHTTP(w http.ResponseWriter, _ *http.Request) {
	s, ok := n.regionStatus()
	if !ok {
		region := s.Region
		if region == "" {
			region = "default"
		}
		s = RegionStatus{Region: region, Bridges: []cluster.BridgeState{}, Others: []cluster.OtherRegion{}}
	}
	n.writeJSON(w, http.StatusOK, s)
}
