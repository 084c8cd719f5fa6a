local function ring(r, q, claim, me, tag)
  for _ = 1, 1024 do
    local head = redis.call("ZPOPMIN", q)
    local id = head[1]
    if id == nil then return false end
    if id == me or redis.call("PUBLISH", "redlock-mux:bell:" .. id, tag .. " " .. r) > 0 then
      redis.call("SET", r, "redlock-mux:reserved:" .. id, "PX", claim)
      return id
    end
  end
  return false
end
