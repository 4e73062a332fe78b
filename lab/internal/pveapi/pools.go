package pveapi

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
)

// pools serves /api2/json/pools as pve-manager's PVE/API2/Pool.pm does
// (14a22df3), each change under lock_user_config:
//   - GET: index, every pool the caller has Pool.Audit on, with its
//     comment; with poolid, that pool alone (Pool.Audit checked, its
//     VM members as {type, id, vmid}) or "pool '<id>' does not exist";
//   - POST poolid [comment]: create_pool (Pool.Allocate on
//     /pool/<poolid>), its errors as createPool's;
//   - PUT poolid comment: update_pool's comment (Pool.Allocate); its
//     vms and storage are pveum's here, not the API's;
//   - DELETE poolid: delete_pool (Pool.Allocate), an empty pool only.
//
// Errors are answered as the nodes' handlers answer them (nodeAPI.fail):
// a parameter's a 400, a permission check a 403, what a handler dies
// with a 500 carrying its message.
func (s *Server) pools(w http.ResponseWriter, r *http.Request, caller string) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a := &nodeAPI{s: s, caller: caller, w: w, r: r}
	id := r.Form.Get("poolid")
	if r.Method != http.MethodGet {
		if id == "" {
			a.fail(&paramErr{"poolid", "property is missing and it is not optional"})
			return
		}
		if err := verifyPoolName(id); err != nil {
			a.fail(&paramErr{"poolid", err.Error()})
			return
		}
		unlock, err := s.Access.lock()
		if err != nil {
			a.fail(err)
			return
		}
		defer unlock()
	}
	cfg, err := ReadUserConfig(s.Access.UserCfg)
	if err != nil {
		a.fail(err)
		return
	}
	a.cfg = cfg
	switch r.Method {
	case http.MethodGet:
		if id != "" {
			a.answerPool(id)
			return
		}
		type entry struct {
			PoolID  string `json:"poolid"`
			Comment string `json:"comment,omitempty"`
		}
		list := []entry{}
		for _, p := range sortedKeys(cfg.Pools) {
			if a.check("/pool/"+p, []string{"Pool.Audit"}, false) == nil {
				list = append(list, entry{PoolID: p, Comment: cfg.PoolComments[p]})
			}
		}
		a.ok(list)
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		if err := a.check("/pool/"+id, []string{"Pool.Allocate"}, false); err != nil {
			a.fail(err)
			return
		}
		switch r.Method {
		case http.MethodPost:
			err = cfg.createPool(id, r.Form.Get("comment"))
		case http.MethodPut:
			for k := range r.Form {
				if k != "poolid" && k != "comment" {
					writeError(w, http.StatusNotImplemented, "the lab's PUT /pools sets a comment only, not "+k)
					return
				}
			}
			err = a.updatePoolComment(id)
		case http.MethodDelete:
			err = cfg.deletePool(id)
		}
		if err == nil {
			err = cfg.Write(s.Access.UserCfg)
		}
		if err != nil {
			a.fail(err)
			return
		}
		a.ok(nil)
	default:
		writeError(w, http.StatusNotImplemented, "Method '"+r.Method+" /pools' not implemented")
	}
}

// answerPool is GET /pools?poolid=: the pool with its comment and its VM
// members.
func (a *nodeAPI) answerPool(id string) {
	if err := a.check("/pool/"+id, []string{"Pool.Audit"}, false); err != nil {
		a.fail(err)
		return
	}
	vms, found := a.cfg.Pools[id]
	if !found {
		a.fail(fmt.Errorf("pool '%s' does not exist", id))
		return
	}
	members := []map[string]any{}
	for _, vmid := range slices.Sorted(maps.Keys(vms)) {
		members = append(members, map[string]any{"type": "qemu", "id": "qemu/" + strconv.Itoa(vmid), "vmid": vmid})
	}
	a.ok([]struct {
		PoolID  string           `json:"poolid"`
		Comment string           `json:"comment,omitempty"`
		Members []map[string]any `json:"members"`
	}{{PoolID: id, Comment: a.cfg.PoolComments[id], Members: members}})
}

// updatePoolComment is update_pool with a comment only: the lab's API
// leaves a pool's members to pveum.
func (a *nodeAPI) updatePoolComment(id string) error {
	if _, found := a.cfg.Pools[id]; !found {
		return fmt.Errorf("pool '%s' does not exist", id)
	}
	if c, set := a.r.Form["comment"]; set {
		a.cfg.PoolComments[id] = c[0]
	}
	return nil
}
