"""Drives a running forge-sim with python-gitlab and PyGithub, the forges' own client libraries.

Ordinary operations, lists read over several pages (small `per_page`, more objects than fit on
one page), so that the simulator's pagination, shapes and routes are judged by real clients.

Usage: check_clients.py --base http://127.0.0.1:PORT --token TOKEN
(GitLab at {base}/api/v4, GitHub REST at {base}, GraphQL at {base}/graphql, control at
{base}/_sim). Prints one line per check and `SUMMARY passed=N failed=M`; exits 1 on any failure.
"""

import argparse
import base64
import sys
import traceback
import warnings

import github
import gitlab
import requests

PER_PAGE = 2
RESULTS = []


def check(name):
    """Runs the decorated function as one named check, recording its outcome."""

    def run(function):
        try:
            function()
        except Exception:  # noqa: BLE001 - every failure is reported, none stops the run
            detail = traceback.format_exc().strip().splitlines()
            RESULTS.append((name, False, " | ".join(detail[-3:])))
            print(f"FAIL {name}: {detail[-1]}", flush=True)
        else:
            RESULTS.append((name, True, ""))
            print(f"PASS {name}", flush=True)
        return function

    return run


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


class Control:
    """The simulator's control API (`/_sim`): sets up what the clients then read."""

    def __init__(self, base):
        self.base = f"{base}/_sim"

    def post(self, path, body):
        response = requests.post(f"{self.base}{path}", json=body, timeout=10)
        if response.status_code >= 300:
            raise AssertionError(f"control POST {path}: {response.status_code} {response.text}")
        return response.json() if response.text else None

    def patch(self, path, body):
        response = requests.patch(f"{self.base}{path}", json=body, timeout=10)
        if response.status_code >= 300:
            raise AssertionError(f"control PATCH {path}: {response.status_code} {response.text}")


def gitlab_checks(base, token, control):
    gl = gitlab.Gitlab(url=base, private_token=token, per_page=PER_PAGE)
    jobs = [{"name": name, "outcome": "success"} for name in ("build", "unit", "lint")]
    for index in range(3):
        control.post("/gitlab/projects", {"path": f"clients/p{index}", "jobs": jobs})
    state = {}

    @check("gitlab: auth and current user")
    def _():
        gl.auth()
        expect(gl.user.username, "no username")

    @check("gitlab: projects listed over pages")
    def _():
        paths = [p.path_with_namespace for p in gl.projects.list(get_all=True)]
        expect(
            {"clients/p0", "clients/p1", "clients/p2"} <= set(paths),
            f"projects: {paths}",
        )
        expect(len(paths) == len(set(paths)), f"duplicates across pages: {paths}")

    @check("gitlab: users listed over pages")
    def _():
        for name in ("ann", "ben"):
            control.post("/users", {"username": name, "token": f"{name}-token"})
        names = [u.username for u in gl.users.list(get_all=True)]
        expect({"ann", "ben", gl.user.username} <= set(names), f"users: {names}")
        expect([u.username for u in gl.users.list(username="ann")] == ["ann"], "by username")

    project = gl.projects.get("clients/p0")
    state["project"] = project

    @check("gitlab: branches created and listed over pages")
    def _():
        for index in range(3):
            project.branches.create({"branch": f"feature-{index}", "ref": "main"})
        names = sorted(b.name for b in project.branches.list(get_all=True))
        expect(names == ["feature-0", "feature-1", "feature-2", "main"], f"branches: {names}")

    @check("gitlab: commits created and listed over pages")
    def _():
        for index in range(3):
            project.commits.create(
                {
                    "branch": f"feature-{index}",
                    "commit_message": f"change {index}",
                    "actions": [
                        {
                            "action": "create",
                            "file_path": f"src/deep/f{index}.txt",
                            "content": f"{index}\n",
                        }
                    ],
                }
            )
        listed = project.commits.list(ref_name="feature-2", get_all=True)
        expect(listed[0].title == "change 2", f"newest first: {[c.title for c in listed]}")
        expect(len(listed) >= 2, "the branch's history, root included")

    @check("gitlab: repository tree, recursive and not")
    def _():
        deep = project.repository_tree(ref="feature-0", recursive=True, get_all=True)
        entries = {(e["path"], e["type"]) for e in deep}
        for wanted in [("src", "tree"), ("src/deep", "tree"), ("src/deep/f0.txt", "blob")]:
            expect(wanted in entries, f"{wanted} missing from {sorted(entries)}")
        top = project.repository_tree(ref="feature-0", get_all=True)
        expect(all("/" not in e["path"] for e in top), f"top level only: {top}")
        expect(("src", "tree") in {(e["path"], e["type"]) for e in top}, f"top: {top}")

    @check("gitlab: merge requests created and listed over pages")
    def _():
        for index in range(3):
            project.mergerequests.create(
                {
                    "source_branch": f"feature-{index}",
                    "target_branch": "main",
                    "title": f"Change {index}",
                }
            )
        mrs = project.mergerequests.list(get_all=True, state="opened")
        expect(len(mrs) == 3, f"merge requests: {[m.iid for m in mrs]}")
        lazy = list(project.mergerequests.list(iterator=True))
        expect(len(lazy) == 3, f"iterator: {len(lazy)}")
        pages = project.mergerequests.list(iterator=True)
        expect(pages.total == 3 and pages.total_pages == 2, f"totals {pages.total} {pages.total_pages}")

    # A project of its own (no CI), so that the checks below change no count
    # the others read.
    control.post("/gitlab/projects", {"path": "clients/answers"})
    answers = gl.projects.get("clients/answers")

    @check("gitlab: the creation's answer is the merge request")
    def _():
        answers.branches.create({"branch": "answer", "ref": "main"})
        answers.commits.create(
            {
                "branch": "answer",
                "commit_message": "a change",
                "actions": [{"action": "create", "file_path": "a.txt", "content": "a\n"}],
            }
        )
        mr = answers.mergerequests.create(
            {"source_branch": "answer", "target_branch": "main", "title": "Answer", "labels": "a,b"}
        )
        state["answer"] = mr.iid
        head = answers.branches.get("answer").commit["id"]
        expect(mr.sha == head, f"sha {mr.sha} head {head}")
        expect(mr.author["username"] == gl.user.username, f"author {mr.author}")
        expect(sorted(mr.labels) == ["a", "b"], f"labels {mr.labels}")
        expect(mr.state == "opened" and mr.web_url, f"state {mr.state}")
        expect("detailed_merge_status" in mr.attributes, "detailed_merge_status")

    @check("gitlab: a second open merge request from a branch is a 409")
    def _():
        try:
            answers.mergerequests.create(
                {"source_branch": "answer", "target_branch": "main", "title": "Again"}
            )
        except gitlab.exceptions.GitlabCreateError as error:
            expect(error.response_code == 409, f"status {error.response_code}")
            expect(
                "Another open merge request already exists for this source branch"
                in str(error.error_message),
                f"message {error.error_message!r}",
            )
        else:
            raise AssertionError("a second open merge request was created")
        mrs = answers.mergerequests.list(get_all=True, state="opened", source_branch="answer")
        expect([m.iid for m in mrs] == [state["answer"]], f"open from answer: {mrs}")

    @check("gitlab: creating a branch that exists is refused, a commit tells its stats")
    def _():
        try:
            answers.commits.create(
                {
                    "branch": "answer",
                    "start_branch": "main",
                    "commit_message": "again",
                    "actions": [{"action": "create", "file_path": "again.txt", "content": "x"}],
                }
            )
        except gitlab.exceptions.GitlabCreateError as error:
            expect(error.response_code == 400, f"status {error.response_code}")
            expect(
                str(error.error_message)
                == "A branch called 'answer' already exists. Switch to that branch in order to make changes",
                f"message {error.error_message!r}",
            )
        else:
            raise AssertionError("an existing branch was created again")
        main = answers.branches.get("main").commit["id"]
        commit = answers.commits.create(
            {
                "branch": "stats",
                "start_branch": "main",
                "commit_message": "two lines",
                "actions": [{"action": "create", "file_path": "two.txt", "content": "1\n2\n"}],
            }
        )
        expect(commit.stats == {"additions": 2, "deletions": 0, "total": 2}, f"{commit.stats}")
        expect(commit.parent_ids == [main], f"parents {commit.parent_ids}, main {main}")

    @check("gitlab: notes posted, edited and listed over pages")
    def _():
        mr = project.mergerequests.get(1)
        created = [mr.notes.create({"body": f"note {index}"}) for index in range(3)]
        note = mr.notes.get(created[0].id)
        note.body = "edited"
        note.save()
        expect(mr.notes.get(created[0].id).body == "edited", "edit kept")
        bodies = sorted(n.body for n in mr.notes.list(get_all=True))
        expect(bodies == ["edited", "note 1", "note 2"], f"notes: {bodies}")

    @check("gitlab: approvals of a merge request")
    def _():
        approvals = project.mergerequests.get(1).approvals.get()
        expect(approvals.approved_by == [], f"approved_by: {approvals.approved_by}")

    @check("gitlab: pipelines and jobs listed over pages")
    def _():
        pipelines = project.pipelines.list(get_all=True)
        expect(len(pipelines) == 3, f"pipelines: {[p.id for p in pipelines]}")
        mr_pipelines = project.mergerequests.get(1).pipelines.list(get_all=True)
        expect(len(mr_pipelines) == 1, f"merge request pipelines: {mr_pipelines}")
        jobs = project.pipelines.get(pipelines[0].id).jobs.list(get_all=True)
        expect(sorted(j.name for j in jobs) == ["build", "lint", "unit"], f"jobs: {jobs}")
        all_jobs = project.jobs.list(get_all=True)
        expect(len(all_jobs) == 9, f"project jobs: {len(all_jobs)}")

    @check("gitlab: protected branches listed over pages")
    def _():
        for name in ("release/*", "stable", "hotfix-*"):
            control.post(f"/gitlab/projects/{project.id}/protected_branches", {"name": name})
        names = sorted(p.name for p in project.protectedbranches.list(get_all=True))
        expect(names == ["hotfix-*", "main", "release/*", "stable"], f"protected: {names}")
        expect(project.protectedbranches.get("main").name == "main", "get one")

    @check("gitlab: merge trains listed")
    def _():
        control.post("/gitlab/projects", {"path": "clients/trains", "merge_trains_enabled": True})
        trains = gl.projects.get("clients/trains").merge_trains.list(get_all=True)
        expect(trains == [], f"merge trains: {trains}")


def github_checks(base, token, control):
    # No client-side throttling: the simulator has no secondary rate limit to respect.
    gh = github.Github(
        base_url=base,
        auth=github.Auth.Token(token),
        per_page=PER_PAGE,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )
    checks = [
        {"name": name, "outcome": "success", "kind": "check_run"} for name in ("a", "b", "c")
    ]
    control.post("/github/repos", {"owner": "clients", "name": "app", "checks": checks})
    repo = gh.get_repo("clients/app")
    state = {}

    @check("github: current user")
    def _():
        expect(gh.get_user().login, "no login")

    @check("github: commits through the git data API")
    def _():
        main = repo.get_git_ref("heads/main")
        parent = repo.get_git_commit(main.object.sha)
        blob = repo.create_git_blob("nested\n", "utf-8")
        element = github.InputGitTreeElement("src/deep/f.txt", "100644", "blob", sha=blob.sha)
        tree = repo.create_git_tree([element], base_tree=parent.tree)
        commit = repo.create_git_commit("nested file", tree, [parent])
        repo.create_git_ref("refs/heads/feature-0", commit.sha)
        state["tree"] = tree.sha
        for index in (1, 2):
            control.post(
                "/github/repos/clients/app/push",
                {"branch": f"feature-{index}", "files": {f"f{index}.txt": f"{index}\n"}},
            )

    @check("github: tree content inline, and the same content is the same tree")
    def _():
        main = repo.get_git_ref("heads/main")
        parent = repo.get_git_commit(main.object.sha)
        text = github.InputGitTreeElement("inline/é.txt", "100644", "blob", content="héllo\n")
        tree = repo.create_git_tree([text], base_tree=parent.tree)
        entries = {e.path: e for e in repo.get_git_tree(tree.sha, recursive=True).tree}
        blob = repo.get_git_blob(entries["inline/é.txt"].sha)
        expect(blob.encoding == "base64", f"encoding {blob.encoding}")
        expect(base64.b64decode(blob.content).decode() == "héllo\n", "content written out")
        readme = repo.get_contents("README.md", ref="main").decoded_content.decode()
        same = github.InputGitTreeElement("README.md", "100644", "blob", content=readme)
        unchanged = repo.create_git_tree([same], base_tree=parent.tree)
        expect(unchanged.sha == parent.tree.sha, f"{unchanged.sha} != {parent.tree.sha}")

    @check("github: branches listed over pages")
    def _():
        names = sorted(b.name for b in repo.get_branches())
        expect(names == ["feature-0", "feature-1", "feature-2", "main"], f"branches: {names}")
        expect(repo.get_branches().totalCount == 4, "totalCount from the last link")

    @check("github: trees, recursive and not")
    def _():
        deep = repo.get_git_tree(state["tree"], recursive=True)
        entries = {(e.path, e.type) for e in deep.tree}
        for wanted in [("src", "tree"), ("src/deep", "tree"), ("src/deep/f.txt", "blob")]:
            expect(wanted in entries, f"{wanted} missing from {sorted(entries)}")
        expect(deep.raw_data.get("truncated") is False, "truncated: false")
        top = repo.get_git_tree(state["tree"])
        expect(all("/" not in e.path for e in top.tree), f"top level only: {top.tree}")

    @check("github: pull requests created and listed over pages")
    def _():
        pulls = [
            repo.create_pull(title=f"Change {i}", body="b", head=f"feature-{i}", base="main")
            for i in range(3)
        ]
        state["pull"] = pulls[0]
        listed = repo.get_pulls(state="open")
        expect(sorted(p.number for p in listed) == [1, 2, 3], f"pulls: {list(listed)}")
        expect(listed.totalCount == 3, f"totalCount {listed.totalCount}")

    @check("github: a second pull request from a branch is a 422")
    def _():
        try:
            repo.create_pull(title="Again", body="b", head="feature-0", base="main")
        except github.GithubException as error:
            expect(error.status == 422, f"status {error.status}")
            messages = [e.get("message") for e in error.data.get("errors", [])]
            expect(
                messages == ["A pull request already exists for clients:feature-0."],
                f"errors {error.data}",
            )
        else:
            raise AssertionError("a second pull request was created")
        open_from = [p.number for p in repo.get_pulls(state="open", head="clients:feature-0")]
        expect(open_from == [state["pull"].number], f"open from feature-0: {open_from}")

    @check("github: the creation's answer is the pull request")
    def _():
        pull = state["pull"]
        head = repo.get_branch("feature-0").commit.sha
        expect(pull.head.sha == head and pull.head.ref == "feature-0", f"head {pull.head}")
        expect(pull.user.login == gh.get_user().login, f"user {pull.user.login}")
        expect(pull.state == "open" and pull.html_url, f"state {pull.state}")

    @check("github: issue comments posted, edited and listed over pages")
    def _():
        pull = state["pull"]
        created = [pull.create_issue_comment(f"comment {i}") for i in range(3)]
        created[0].edit("edited")
        bodies = [c.body for c in pull.get_issue_comments()]
        expect(bodies == ["edited", "comment 1", "comment 2"], f"comments: {bodies}")

    @check("github: reviews listed over pages")
    def _():
        pull = state["pull"]
        for user, event in (("alice", "COMMENT"), ("bob", "REQUEST_CHANGES"), ("carol", "APPROVE")):
            control.post(
                f"/github/repos/clients/app/pulls/{pull.number}/reviews",
                {"user": user, "event": event, "body": event.lower()},
            )
        states = [r.state for r in pull.get_reviews()]
        expect(states == ["COMMENTED", "CHANGES_REQUESTED", "APPROVED"], f"reviews: {states}")

    @check("github: labels added and listed over pages")
    def _():
        pull = state["pull"]
        pull.add_to_labels("one", "two", "three")
        names = sorted(label.name for label in pull.get_labels())
        expect(names == ["one", "three", "two"], f"labels: {names}")

    @check("github: a label named in another case is the repository's label")
    def _():
        created = repo.create_label("Needs-Review", "d73a4a", "waiting for a person")
        expect(created.name == "Needs-Review" and created.color == "d73a4a", f"created {created}")
        try:
            repo.create_label("needs-review", "ededed")
            raise AssertionError("a label differing only in case was made")
        except github.GithubException as error:
            expect(error.status == 422, f"status {error.status}")
            codes = [e.get("code") for e in error.data.get("errors", [])]
            expect(codes == ["already_exists"], f"errors {error.data}")
        expect(repo.get_label("NEEDS-REVIEW").name == "Needs-Review", "get_label in another case")
        pull = state["pull"]
        pull.add_to_labels("needs-review")
        names = sorted(label.name for label in pull.get_labels())
        expect("Needs-Review" in names and "needs-review" not in names, f"labels: {names}")
        pull.remove_from_labels("NEEDS-review")
        names = sorted(label.name for label in pull.get_labels())
        expect(names == ["one", "three", "two"], f"labels after removal: {names}")

    @check("github: check runs and statuses listed over pages")
    def _():
        commit = repo.get_commit(state["pull"].head.sha)
        runs = commit.get_check_runs()
        expect(sorted(r.name for r in runs) == ["a", "b", "c"], f"check runs: {list(runs)}")
        expect(runs.totalCount == 3, f"totalCount {runs.totalCount}")
        for index in range(3):
            commit.create_status(state="success", context=f"ctx-{index}")
        contexts = sorted(s.context for s in commit.get_statuses())
        expect(contexts == ["ctx-0", "ctx-1", "ctx-2"], f"statuses: {contexts}")
        combined = commit.get_combined_status()
        expect(combined.total_count == 3 and combined.state == "success", "combined status")

    @check("github: GraphQL connection paged with cursors")
    def _():
        query = """query($after: String) {
          repository(owner: "clients", name: "app") {
            pullRequests(first: 1, after: $after) {
              totalCount
              pageInfo { hasNextPage endCursor }
              nodes { number }
            }
          }
        }"""
        numbers, after, rounds = [], None, 0
        while rounds < 10:
            rounds += 1
            _, data = gh.requester.graphql_query(query, {"after": after})
            connection = data["data"]["repository"]["pullRequests"]
            expect(connection["totalCount"] == 3, f"totalCount {connection}")
            numbers += [node["number"] for node in connection["nodes"]]
            if not connection["pageInfo"]["hasNextPage"]:
                break
            after = connection["pageInfo"]["endCursor"]
        expect(numbers == [1, 2, 3], f"numbers {numbers} after {rounds} rounds")

    @check("github: reviewDecision follows the review requirement")
    def _():
        query = """query($n: Int!) {
          repository(owner: "clients", name: "app") { pullRequest(number: $n) { reviewDecision } }
        }"""

        def decision():
            _, data = gh.requester.graphql_query(query, {"n": state["pull"].number})
            return data["data"]["repository"]["pullRequest"]["reviewDecision"]

        expect(decision() is None, "no review required: null")
        control.patch("/github/repos/clients/app", {"required_approvals": 1})
        expect(decision() == "CHANGES_REQUESTED", "bob's request counts once required")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the simulator's URL")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    base = args.base.rstrip("/")
    control = Control(base)
    warnings.simplefilter("ignore")
    for name, suite in (("gitlab", gitlab_checks), ("github", github_checks)):
        try:
            suite(base, args.token, control)
        except Exception:  # noqa: BLE001 - a failed set-up is a failure, reported like the rest
            RESULTS.append((f"{name}: set-up", False, traceback.format_exc().splitlines()[-1]))
            print(f"FAIL {name}: set-up: {traceback.format_exc().splitlines()[-1]}", flush=True)
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"SUMMARY passed={len(RESULTS) - len(failed)} failed={len(failed)}", flush=True)
    for name, ok, detail in RESULTS:
        if not ok:
            print(f"  {name}: {detail}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
