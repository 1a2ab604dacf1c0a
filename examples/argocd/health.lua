-- Argo CD health check for RedlockCluster (redlock.dev/v1alpha1). Install it with
-- argocd-cm-patch.yaml (it embeds this file), or paste it under
-- `resource.customizations.health.redlock.dev_RedlockCluster` in the argocd-cm ConfigMap.
--
-- Healthy:     a quorum serves and nothing is in progress (condition Ready=True).
-- Degraded:    the cluster cannot proceed without you (Stalled=True: its spec rejected, or a
--              name it needs taken), or it has no quorum serving (Available=False) once done.
-- Progressing: anything else: members starting or held after losing their keys, a rolling
--              replacement, a spec the operator has not looked at yet.
local hs = { status = "Progressing", message = "Waiting for the operator to report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.message = "Waiting for the operator to look at generation " .. tostring(generation)
  return hs
end
local conditions = {}
for _, c in ipairs(obj.status.conditions) do
  conditions[c.type] = c
end
local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.type .. " (" .. tostring(c.reason) .. "): " .. c.message
  end
  return c.type .. " (" .. tostring(c.reason) .. ")"
end
-- The first of these that holds decides.
local function when(type, status, health)
  local c = conditions[type]
  if c == nil or c.status ~= status then
    return false
  end
  hs.status = health
  hs.message = said(c)
  return true
end
local _ = when("Stalled", "True", "Degraded")
  or when("Ready", "True", "Healthy")
  or when("Reconciling", "True", "Progressing")
  or when("Available", "False", "Degraded")
return hs
