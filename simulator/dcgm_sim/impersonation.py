"""`Impersonate-User` / `Impersonate-Group` headers (`kubectl --as`, `--as-group`), as the real
server's filter handles them (apiserver/pkg/endpoints/filters/impersonation.go):

- the caller must be allowed the verb `impersonate` on `users` (name = the user), on
  `serviceaccounts` in the account's namespace (for `system:serviceaccount:<ns>:<name>`), and on
  `groups` (name = each group); otherwise 403 naming the first refused one;
- groups without a user are a 400;
- the impersonated ServiceAccount gets `system:serviceaccounts` and
  `system:serviceaccounts:<ns>` when no groups are given, and every impersonated user but
  `system:anonymous` gets `system:authenticated` unless `system:authenticated` or
  `system:unauthenticated` was asked for;
- the request then runs, and is authorised, as the impersonated user (the request log shows
  that user, as the audit log's `user` does).

Impersonate-Uid and Impersonate-Extra-* are not modelled (ignored).
"""

from __future__ import annotations

from dcgm_sim.access import AccessControl, Attributes, Policy, forbidden_reason
from dcgm_sim.exchange import Request
from dcgm_sim.statuses import ApiError, bad_request

SA_PREFIX = "system:serviceaccount:"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


def _groups(req: Request) -> list[str]:
    """Repeated headers arrive joined with ", " (`server`): split them back."""
    raw = req.header("impersonate-group")
    return [g.strip() for g in raw.split(",") if g.strip()] if raw else []


def _refused(attrs: Attributes) -> ApiError:
    message = f'{attrs.resource} "{attrs.name}" is forbidden: {forbidden_reason(attrs)}'
    details = {"name": attrs.name, "kind": attrs.resource}
    return ApiError(403, "Forbidden", message, details)


def _check(caller: Policy, attrs: Attributes) -> None:
    if not caller.decide(attrs).allowed:
        raise _refused(attrs)


def effective_policy(access: AccessControl, caller: Policy, req: Request) -> Policy:
    """The policy the request runs under: the caller's, or the impersonated user's."""
    user = req.header("impersonate-user").strip()
    groups = _groups(req)
    if not user:
        if groups:
            raise bad_request(f"requested {[{'Group': g} for g in groups]} without "
                              "impersonating a user")
        return caller
    if user.startswith(SA_PREFIX) and user.count(":") == 3:
        namespace, name = user[len(SA_PREFIX):].split(":")
        _check(caller, Attributes(caller.user, "impersonate", "", "serviceaccounts", "",
                                  namespace, name))
        if not groups:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        _check(caller, Attributes(caller.user, "impersonate", "", "users", "", "", user))
    for group in _groups(req):
        _check(caller, Attributes(caller.user, "impersonate", "", "groups", "", "", group))
    if user != ANONYMOUS and not {AUTHENTICATED, UNAUTHENTICATED} & set(groups):
        groups.append(AUTHENTICATED)
    return access.policy_of(user, tuple(groups))
