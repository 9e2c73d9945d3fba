"""A local AWS KMS for payoutd's tests: moto's server, with `Sign` as AWS documents it.

moto 5.2.5 differs from AWS KMS's `Sign` in two ways that matter to a signer built on it
(https://docs.aws.amazon.com/kms/latest/APIReference/API_Sign.html):
- `MessageType=DIGEST` means "the message is already a digest: do not hash it again"; moto ignores
  `MessageType` and hashes it again, so a signature over an Ethereum transaction hash cannot be
  recovered to the key's address.
- A disabled key is refused (`DisabledException`, "the specified KMS key is not enabled"); moto
  signs with it anyway.
Everything else (CreateKey, GetPublicKey, DisableKey, EnableKey, key usage and algorithm checks) is
moto's own. Run as `server.py -H 127.0.0.1 -p 0`, with the same arguments as `moto_server`.
"""

import base64
import json
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils
from moto.core.exceptions import JsonRESTError
from moto.kms.exceptions import ValidationException
from moto.kms.responses import KmsResponse
from moto.kms.utils import ECDSAPrivateKey
from moto.server import main

DIGEST_BYTES = {"ECDSA_SHA_256": 32, "ECDSA_SHA_384": 48, "ECDSA_SHA_512": 64}
HASHES = {"ECDSA_SHA_256": hashes.SHA256, "ECDSA_SHA_384": hashes.SHA384, "ECDSA_SHA_512": hashes.SHA512}


class DisabledException(JsonRESTError):
    code = 400

    def __init__(self, key_arn: str):
        super().__init__("DisabledException", f"{key_arn} is disabled.")


def sign(self: KmsResponse) -> str:
    key_id = self._get_param("KeyId")
    message_type = self._get_param("MessageType") or "RAW"
    algorithm = self._get_param("SigningAlgorithm")
    self._validate_key_id(key_id)
    key = self.kms_backend.describe_key(key_id)
    if key.key_state != "Enabled":
        raise DisabledException(key.arn)
    if key.key_usage != "SIGN_VERIFY" or not isinstance(key.private_key, ECDSAPrivateKey):
        raise ValidationException(f"KeyId {key_id}: this local KMS signs with ECC SIGN_VERIFY keys only")
    if algorithm not in key.signing_algorithms:
        raise ValidationException(f"SigningAlgorithm {algorithm} is not valid for {key.arn}")
    message = self._get_param("Message")  # moto's KmsResponse decodes the base64 blob
    hash_algorithm = HASHES[algorithm]()
    if message_type == "DIGEST":
        if len(message) != DIGEST_BYTES[algorithm]:
            raise ValidationException(f"Digest is invalid length for algorithm {algorithm}.")
        signature = key.private_key.private_key.sign(message, ec.ECDSA(utils.Prehashed(hash_algorithm)))
    else:
        signature = key.private_key.private_key.sign(message, ec.ECDSA(hash_algorithm))
    return json.dumps({"KeyId": key.arn, "Signature": base64.b64encode(signature).decode(), "SigningAlgorithm": algorithm})


KmsResponse.sign = sign

if __name__ == "__main__":
    main(sys.argv[1:])
