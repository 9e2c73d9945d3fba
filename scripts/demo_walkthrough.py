"""Walks a payout platform's day through the API: fund, pay, retry, collide, cancel; prints what happened."""
import concurrent.futures
import json
import os
import urllib.error
import urllib.request

BASE = os.environ["BASE"]
MERCHANT = json.loads(os.environ["MERCHANT_JSON"])
OPERATOR = os.environ["PAYOUTD_OPERATOR_KEY"]
USDC = "evm:31337/USDC"
RECIPIENTS = [
    "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
    "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
    "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
    "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
]


def call(method, path, body=None, key=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + (key or MERCHANT["api_key"]))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def main():
    print(f"merchant {MERCHANT['id']} api_key {MERCHANT['api_key']}")
    status, _, _ = call("POST", "/v1/deposits", {"merchant_id": MERCHANT["id"], "asset": USDC,
                                                  "amount": "1000000000", "idempotency_key": "demo-funding-1"}, key=OPERATOR)
    assert status == 201, status
    print("deposited 1000 USDC (1000000000 base units)")

    created = replays = reused = canceled = 0
    ids = []
    for i in range(40):
        body = {"asset": USDC, "amount": str(1_000_000 + i), "destination": RECIPIENTS[i % 4],
                "idempotency_key": f"withdrawal-{i:05d}", "metadata": {"user": f"u{i}"}}
        for attempt in range(2):  # every request is sent twice, as a client retrying after a timeout would
            status, headers, payout = call("POST", "/v1/payouts", body)
            if status == 201:
                created += 1
                ids.append(payout["id"])
            elif status == 200 and headers.get("Idempotent-Replayed") == "true":
                replays += 1
            else:
                raise SystemExit(f"unexpected {status}: {payout}")

    # A burst of 16 identical requests in parallel: one payout.
    burst = {"asset": USDC, "amount": "5000000", "destination": RECIPIENTS[0], "idempotency_key": "bonus-burst-0001"}
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: call("POST", "/v1/payouts", burst), range(16)))
    burst_ids = {p["id"] for _, _, p in results}
    created += sum(1 for s, _, _ in results if s == 201)
    replays += sum(1 for s, h, _ in results if s == 200 and h.get("Idempotent-Replayed") == "true")
    print(f"burst of 16 identical requests -> {len(burst_ids)} payout")

    # The same key with another amount is refused and changes nothing.
    status, _, problem = call("POST", "/v1/payouts", dict(burst, amount="5000001"))
    assert status == 422 and problem["type"].endswith("idempotency-key-reused"), (status, problem)
    reused += 1
    print(f"key reused with another amount -> {status} {problem['type']}")

    # More than the balance: refused, nothing held.
    status, _, problem = call("POST", "/v1/payouts", {"asset": USDC, "amount": "999999999999", "destination": RECIPIENTS[1],
                                                      "idempotency_key": "too-much-0001"})
    print(f"payout above the balance -> {status} {problem['type']}")

    for pid in ids[:5]:
        status, _, payout = call("POST", f"/v1/payouts/{pid}/cancel")
        assert status == 200 and payout["status"] == "canceled", (status, payout)
        canceled += 1
        status, headers, _ = call("POST", f"/v1/payouts/{pid}/cancel")
        assert headers.get("Idempotent-Replayed") == "true"

    _, _, found = call("GET", "/v1/payouts?idempotency_key=withdrawal-00007")
    print(f"query before retry: withdrawal-00007 -> {found['data'][0]['id']} ({found['data'][0]['status']})")
    _, _, balances = call("GET", "/v1/balances")
    b = next(x for x in balances["data"] if x["asset"] == USDC)
    print(f"balance {USDC}: available={b['available']} held={b['held']}")
    print(f"demo: payouts={created} replays={replays} key_reuse_refused={reused} canceled={canceled} "
          f"available={b['available']} held={b['held']}")


if __name__ == "__main__":
    main()
