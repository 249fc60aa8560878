__all__ = []

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__

# %% ../nbs/74_all.ipynb #22245354
# `ddpsafe.core`: the names of `ddpsafe.dist.collectives`, where its code lives
from .dist.collectives import *
from .dist.collectives import __all__