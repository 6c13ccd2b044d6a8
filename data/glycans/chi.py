"""CHI torsion energies of glycosidic linkages (Nivedha et al. 2014, 2016; Rosetta
``CHIEnergyFunction``): each glycosidic torsion has E(x) = d + sum_i a_i exp(-(x - b_i)^2 / c_i)
with x in degrees; phi functions by the child's anomer on [-180, 180), psi functions by the
parent's attachment on [0, 360)."""

from __future__ import annotations

import torch

# kind -> (a, b, c, d); Rosetta's CHI_energy_function_for_*.params
CHI_PARAMS = {
    "alpha_phi": ([2.977, 102.25, 10.745, 3.6735, 2.061, 6.1939, -2.1115, -98.001],
                  [-199.49, 170.6, -105.31, 6.2012, 91.655, -22.979, 83.602, 170.01],
                  [677.81, 1696.8, 4724.6, 1347.7, 1500, 2122.3, 1254.1, 1598.7], 0.0),
    "beta_phi": ([450.54, 23.712, 5.9353, 22.467, 10.036, -18.141, 5.8823],
                 [-330.77, 304.63, -152.08, -23.516, 120.96, -24.268, 19.632],
                 [4449.8, 8375.2, 6049.8, 606.90, 4038, 543.05, 897.93], -2.1283),
    "psi_2ax_3eq_4ax": ([4.6237, 4.6139, 4.9419, 0.4029, 0.79888, 0.22299],
                        [5.0456, 362.49, 121.2, 241.43, 68.425, 192.93],
                        [5005.8, 2090.6, 2093.8, 456.83, 678.81, 347.25], -0.12565),
    "psi_2eq_3ax_4eq": ([4.4681, 4.382, 284.95, 4.7613, -169.2, -118.44],
                        [1e-30, 357.77, 146.64, 220.68, 147.37, 146.06],
                        [1279.6, 6050.1, 1551.8, 5892.9, 1742.5, 1359.8], 1.0220),
    "alpha6_psi": ([67.943, 6.134, 3.276, 0.728, 2.574, 5.760, 3.475, -0.741],
                   [-59.539, 10.479, 54.296, 131.068, 245.103, 360.0, 321.678, 199.107],
                   [993.324, 945.771, 851.528, 1037.412, 2012.995, 1153.397, 2080.971,
                    522.180], 0.0),
    "beta6_psi": ([7.249, 1.900, 0.741, 0.200, 0.287, 1.226, 7.411, -0.615, -0.350],
                  [3.606, 96.593, 141.664, 162000.0, 228.171, 292.206, 369.868, 271.319,
                   183.0],
                  [2459.239, 2683.887, 1150.048, 400.0, 272.201, 1134.525, 3499.160, 532.437,
                   100.0], 0.0),
}
CHI_KINDS = list(CHI_PARAMS)


def wrap_to_domain(x_deg, kind: str):
    """Map angles (degrees) into the function's domain: [-180, 180) for phi, [0, 360) for
    psi."""
    if kind.endswith("phi"):
        return torch.remainder(x_deg + 180.0, 360.0) - 180.0
    return torch.remainder(x_deg, 360.0)


def chi_energy(x_deg, kind: str, wrap: bool = True) -> torch.Tensor:
    """E(x) of the CHI function ``kind`` at torsions ``x_deg`` (degrees; any shape,
    differentiable); ``wrap=False`` evaluates the raw sum outside the domain (as Rosetta's
    unit tests do at -180 for psi)."""
    x = torch.as_tensor(x_deg)
    x = x if x.is_floating_point() else x.double()
    a, b, c, d = (torch.as_tensor(v, dtype=x.dtype, device=x.device) for v in CHI_PARAMS[kind])
    x = (wrap_to_domain(x, kind) if wrap else x)[..., None]
    return float(d) + (a * torch.exp(-((x - b) ** 2) / c)).sum(-1)


def chi_derivative(x_deg, kind: str, wrap: bool = True) -> torch.Tensor:
    """The analytic dE/dx (per degree) of ``chi_energy``."""
    a, b, c, _ = (torch.as_tensor(v, dtype=torch.float64) for v in CHI_PARAMS[kind])
    x = torch.as_tensor(x_deg, dtype=torch.float64)
    x = (wrap_to_domain(x, kind) if wrap else x)[..., None]
    return (-2.0 * (x - b) / c * a * torch.exp(-((x - b) ** 2) / c)).sum(-1)
