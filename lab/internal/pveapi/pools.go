package pveapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
// An error a handler dies with is a 500 carrying its message, a
// permission check a 403, as pve-http-server answers them.
func (s *Server) pools(w http.ResponseWriter, r *http.Request, caller string) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	id := r.Form.Get("poolid")
	if r.Method != http.MethodGet {
		if id == "" {
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "message": "Parameter verification failed.\n", "errors": map[string]string{"poolid": "property is missing and it is not optional"}})
			return
		}
		if strings.Count(id, "/") > 2 || !poolName.MatchString(id) {
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "message": "Parameter verification failed.\n", "errors": map[string]string{"poolid": "pool name '" + id + "' contains invalid characters"}})
			return
		}
	}
	var unlock func()
	if r.Method != http.MethodGet {
		var err error
		if unlock, err = s.Access.lock(); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		defer unlock()
	}
	cfg, err := ReadUserConfig(s.Access.UserCfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	allowed := func(priv string) bool {
		_, ok := cfg.Permissions(LabMajor, caller, "/pool/"+id)[priv]
		return ok
	}
	ok := func(data any) {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	}
	save := func() {
		if err := cfg.Write(s.Access.UserCfg); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		ok(nil)
	}
	switch r.Method {
	case http.MethodGet:
		type entry struct {
			PoolID  string `json:"poolid"`
			Comment string `json:"comment,omitempty"`
		}
		if id != "" {
			if !allowed("Pool.Audit") {
				writeError(w, http.StatusForbidden, "Permission check failed (/pool/"+id+", Pool.Audit)")
				return
			}
			vms, found := cfg.Pools[id]
			if !found {
				writeError(w, http.StatusInternalServerError, "pool '"+id+"' does not exist")
				return
			}
			members := []map[string]any{}
			for _, vmid := range slices.Sorted(maps.Keys(vms)) {
				members = append(members, map[string]any{"type": "qemu", "id": "qemu/" + strconv.Itoa(vmid), "vmid": vmid})
			}
			ok([]struct {
				PoolID  string           `json:"poolid"`
				Comment string           `json:"comment,omitempty"`
				Members []map[string]any `json:"members"`
			}{{PoolID: id, Comment: cfg.PoolComments[id], Members: members}})
			return
		}
		list := []entry{}
		for _, p := range sortedKeys(cfg.Pools) {
			if _, ok := cfg.Permissions(LabMajor, caller, "/pool/"+p)["Pool.Audit"]; ok {
				list = append(list, entry{PoolID: p, Comment: cfg.PoolComments[p]})
			}
		}
		ok(list)
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		if !allowed("Pool.Allocate") {
			writeError(w, http.StatusForbidden, "Permission check failed (/pool/"+id+", Pool.Allocate)")
			return
		}
		switch r.Method {
		case http.MethodPost:
			err = cfg.createPool(id, r.Form.Get("comment"))
		case http.MethodPut:
			if _, found := cfg.Pools[id]; !found {
				writeError(w, http.StatusInternalServerError, "pool '"+id+"' does not exist")
				return
			}
			for k := range r.Form {
				if k != "poolid" && k != "comment" {
					writeError(w, http.StatusNotImplemented, "the lab's PUT /pools sets a comment only, not "+k)
					return
				}
			}
			if c, set := r.Form["comment"]; set {
				cfg.PoolComments[id] = c[0]
			}
		case http.MethodDelete:
			err = cfg.deletePool(id)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		save()
	default:
		writeError(w, http.StatusNotImplemented, "Method '"+r.Method+" /pools' not implemented")
	}
}
